//! The one accept path of every listener of both binaries: [`Gate`] takes connections with a
//! pause after a failed accept (so running out of file descriptors sheds connections instead of
//! spinning, and says so in its own words), admits each under the caller's [`Admission`] policy
//! before anything else is spent on it, and [`serve_http1`] serves HTTP/1 with a deadline for the
//! request headers.
//!
//! Why here: the agent's listeners and the discovery service guard themselves the same way, and
//! a fix to one (a spin on `EMFILE`, a missing header deadline) must reach both. What each binary
//! does with a connection over its limits stays its own: the agent closes it at once and counts
//! it, the discovery service answers 503 with its `kind`.

mod accept;
mod http1;
mod log_every;

pub use accept::{AcceptFailure, Accepted, Admission, Gate, Listen, failure_of};
pub use http1::{http1_builder, serve_http1};
pub use log_every::LogEvery;
