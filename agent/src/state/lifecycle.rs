//! The commands that begin a cluster's replicated life or replace it whole: initialization, a
//! restore from a backup, and the end of the formation. Separate because each acts on the
//! state as a whole rather than on one record in it.

use super::records::{CaMaterial, JoinTokenRecord, OperatorTokenRecord};
use super::{ClusterState, FormationRecord, Response};
use crate::api::ErrorKind;

impl ClusterState {
    /// The first entry of a new cluster: its id, CA, formation and first tokens.
    pub(super) fn init_cluster(
        &mut self,
        cluster_id: &str,
        ca: &CaMaterial,
        operator_token: &Option<(String, OperatorTokenRecord)>,
        formation: &Option<FormationRecord>,
        join_secret: &Option<(String, JoinTokenRecord)>,
    ) -> Response {
        if let Some(refused) = self.already_initialized() {
            return refused;
        }
        self.cluster_id = Some(cluster_id.to_string());
        self.ca = Some(ca.clone());
        self.formation = formation.clone();
        if let Some((id, record)) = join_secret {
            self.join_tokens.insert(id.clone(), record.clone());
        }
        if let Some((id, token)) = operator_token {
            self.operator_tokens.insert(id.clone(), token.clone());
        }
        Response::default()
    }

    /// The first entry of a cluster restored from a backup: the backed-up state, whole.
    pub(super) fn restore_state(&mut self, state: &ClusterState) -> Response {
        if let Some(refused) = self.already_initialized() {
            return refused;
        }
        *self = state.clone();
        Response::default()
    }

    /// The formation's cohort has joined: the formation record (and its URL) goes.
    pub(super) fn end_formation(&mut self) -> Response {
        self.formation = None;
        Response::default()
    }

    /// A cluster is initialized (or restored) once only.
    fn already_initialized(&self) -> Option<Response> {
        self.cluster_id
            .is_some()
            .then(|| Response::refused(ErrorKind::InvalidArgument, "cluster already initialized"))
    }
}
