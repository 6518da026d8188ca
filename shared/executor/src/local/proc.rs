//! What the host needs from `/proc`: a process's start time (to tell a live
//! process from a reused pid) and the resident memory of a process group
//! (a container's memory limit covers every process in it).

use std::collections::HashMap;
use std::fs;

/// Field 22 of `/proc/<pid>/stat` (start time in clock ticks), if the
/// process exists.
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_field(&stat, 22)
}

/// Field `n` (1-based) of a `/proc/<pid>/stat` line. The command name
/// (field 2) may contain spaces and parentheses, so fields after it are
/// counted from the last `)`.
pub(crate) fn stat_field(stat: &str, n: usize) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
}

/// Whether `pid` is alive and is the process that started at `ticks`. A
/// zombie (exited, not yet reaped by its parent) is not alive: it will never
/// write anything again.
pub fn is_same_process(pid: i32, ticks: u64) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    !is_zombie(&stat) && stat_field(&stat, 22) == Some(ticks)
}

/// Whether a `/proc/<pid>/stat` line is a zombie's (state `Z`, field 3).
fn is_zombie(stat: &str) -> bool {
    stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()) == Some("Z")
}

/// Resident set size in bytes of every process group, summed over its processes.
pub fn rss_by_group() -> HashMap<i32, u64> {
    let mut total = HashMap::new();
    let Ok(entries) = fs::read_dir("/proc") else { return total };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // Field 5 is the process group, field 24 the RSS in pages.
        let (Some(pgid), Some(pages)) = (stat_field(&stat, 5), stat_field(&stat, 24)) else { continue };
        *total.entry(pgid as i32).or_insert(0) += pages * page_size();
    }
    total
}

/// The kernel's page size, read once from `/proc/self/smaps` (4 KiB if unreadable).
fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        fs::read_to_string("/proc/self/smaps")
            .ok()
            .and_then(|s| {
                s.lines().find(|l| l.starts_with("KernelPageSize:")).and_then(|l| {
                    l.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).map(|kb| kb * 1024)
                })
            })
            .unwrap_or(4096)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_survive_odd_command_names() {
        let line = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1000 250";
        assert_eq!(stat_field(line, 5), Some(1234));
        assert_eq!(stat_field(line, 22), Some(98765));
        assert_eq!(stat_field(line, 24), Some(250));
        assert!(!is_zombie(line));
        assert!(is_zombie(&line.replace(") S ", ") Z ")));
    }

    #[test]
    fn an_exited_child_not_yet_reaped_is_not_alive() {
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = i32::try_from(child.id()).expect("pid");
        let ticks = start_ticks(pid).expect("the child's stat");
        // Exited but unreaped: its stat stays, in state Z, until `wait`.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| is_zombie(&s)) {
            assert!(std::time::Instant::now() < deadline, "the child never exited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!is_same_process(pid, ticks));
        child.wait().expect("reap");
    }

    #[test]
    fn this_process_is_alive_and_has_memory() {
        let pid = std::process::id() as i32;
        let ticks = start_ticks(pid).expect("own stat");
        assert!(is_same_process(pid, ticks));
        assert!(!is_same_process(pid, ticks + 1));
        let pgid = nix::unistd::getpgrp().as_raw();
        assert!(rss_by_group().get(&pgid).copied().unwrap_or(0) > 1024 * 1024);
    }
}
