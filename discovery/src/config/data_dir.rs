//! The default `--data-dir`, apart from the flags because it depends on who runs the service
//! and on the environment, and is tested on its own.

use std::path::PathBuf;

/// Where the embedded database lives by default: the system's state directory when run as root
/// (a service), the user's state directory otherwise (XDG), so that running the service from a
/// checkout never writes into the checkout.
pub fn default_data_dir() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    data_dir_for(
        root,
        std::env::var_os("XDG_STATE_HOME"),
        std::env::var_os("HOME"),
    )
}

pub(super) fn data_dir_for(
    root: bool,
    xdg_state_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> PathBuf {
    const NAME: &str = "muster-discovery";
    let absolute = |v: Option<std::ffi::OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if root {
        return PathBuf::from("/var/lib").join(NAME);
    }
    if let Some(state) = absolute(xdg_state_home) {
        return state.join(NAME);
    }
    if let Some(home) = absolute(home) {
        return home.join(".local/state").join(NAME);
    }
    PathBuf::from("/var/lib").join(NAME)
}
