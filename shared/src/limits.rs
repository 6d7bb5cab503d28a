//! Process limits both binaries size their connection budgets by.

/// The process's soft limit on open file descriptors (`ulimit -n`, from /proc), if it can be
/// read; `usize::MAX` for unlimited.
pub fn open_files() -> Option<usize> {
    parse_open_files(&std::fs::read_to_string("/proc/self/limits").ok()?)
}

fn parse_open_files(limits: &str) -> Option<usize> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(usize::MAX);
    }
    soft.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_read_from_proc() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             95339                95339                processes \n\
                    Max open files            1024                 524288               files     \n";
        assert_eq!(parse_open_files(text), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_open_files(unlimited), Some(usize::MAX));
        assert_eq!(parse_open_files("nothing here"), None);
        assert!(open_files().is_some(), "this process has a limit");
    }
}
