//! `muster config export`: today's cluster as a `cluster.toml` (or the same as JSON), saying
//! where the `[cluster]` values come from. Kept apart from plan and apply: it reads the same
//! observation but writes the file they read, and changes nothing.

use super::gather::gather;
use crate::api::probe::SettingsUpdate;
use crate::apply::manifest::DesiredGroup;
use crate::apply::{DesiredFleetLock, DesiredMember, DesiredSettings, Manifest, Observed};
use crate::cli::{CliError, Target, output};
use crate::outln;

/// `muster config export`: today's cluster as a `cluster.toml` (with `json`, the same as JSON),
/// saying where the `[cluster]` values come from.
pub async fn export(target: &Target, json: bool) -> Result<(), CliError> {
    let observed = gather(target).await?;
    let Some(settings) = &observed.settings else {
        return Err(CliError::Failed(
            "no leader answers, so the cluster's settings cannot be read; `muster status` \
             shows why"
                .into(),
        ));
    };
    let manifest = manifest_of(&observed, settings);
    let leader = observed.leader.as_deref().unwrap_or("the leader");
    if json {
        let mut file = manifest.to_json();
        file["cluster_source"] = settings_source(observed.settings_pinned).into();
        outln!("{}", serde_json::to_string_pretty(&file)?);
        return Ok(());
    }
    let notes = if observed.settings_pinned {
        vec!["written by `muster apply`: every leader uses these, whatever its flags say".into()]
    } else {
        vec![
            format!(
                "{leader}'s flags (--replace-after, --cleanup-dead-after, --min-voters, \
                 --standbys): nothing was written yet;"
            ),
            "`muster apply` writes a value you change here for every leader".into(),
        ]
    };
    output::out(format_args!("{}", manifest.to_toml(&notes)));
    Ok(())
}

/// The cluster as observed, as the file that describes it.
fn manifest_of(observed: &Observed, settings: &SettingsUpdate) -> Manifest {
    Manifest {
        members: observed
            .members
            .iter()
            .map(|m| {
                // The member's own report of its --data-dir; the default for one that did not
                // answer (or an older agent): edit the file where that is wrong.
                let reported = m
                    .report
                    .as_ref()
                    .and_then(|r| r.data_dir_path.clone())
                    .filter(|dir| crate::apply::manifest::is_plain_dir(dir));
                DesiredMember {
                    name: m.name.clone(),
                    address: m.address.clone(),
                    data_dir_given: reported.is_some(),
                    data_dir: reported
                        .unwrap_or_else(|| crate::apply::manifest::DEFAULT_DATA_DIR.into()),
                }
            })
            .collect(),
        settings: DesiredSettings {
            replace_after_ms: Some(settings.replace_after_ms),
            cleanup_dead_after_ms: Some(settings.cleanup_dead_after_ms),
            min_voters: Some(settings.min_voters),
            standbys: Some(settings.standbys),
        },
        fleetlock: observed.fleetlock.as_ref().map(|f| DesiredFleetLock {
            unknown_groups: Some(f.unknown_groups.clone()),
            groups: f
                .groups
                .iter()
                .filter(|g| g.configured)
                .map(|g| {
                    let group = DesiredGroup {
                        slots: g.slots,
                        windows: g.windows.clone(),
                        gates: g.gates.iter().map(|gate| gate.name.clone()).collect(),
                    };
                    (g.name.clone(), group)
                })
                .collect(),
        }),
    }
}

/// Where the settings in force come from, as `config export --json` and `GET /v1/settings`
/// name it.
fn settings_source(pinned: bool) -> &'static str {
    if pinned { "cluster" } else { "leader_flags" }
}
