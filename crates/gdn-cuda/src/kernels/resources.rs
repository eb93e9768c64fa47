//! The ptxas resource report (`--ptxas-options=-v`) parsed per kernel: registers, stack frame, spills,
//! static shared memory, barriers.
//!
//! The lines it reads (ptxas 13.0):
//! ```text
//! ptxas info    : Compiling entry function 'gdn_x' for 'sm_90a'
//! ptxas info    : Function properties for gdn_x
//! ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//! ptxas info    : Used 71 registers, used 1 barriers, 16384 bytes smem, 384 bytes cmem[0]
//! ```
//! "Function properties" blocks of non-inlined device functions are ignored (only the entry's own block
//! counts); a kernel never mentioned in the log is simply absent from the result.

use std::collections::BTreeMap;

/// What ptxas reported for one entry function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelResources {
    pub registers: u32,
    pub stack_frame: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub static_smem: u32,
    pub barriers: u32,
}

impl KernelResources {
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }
}

/// The number right before `unit` in `line` (`"71 registers"` → 71 for unit `registers`).
fn number_before(line: &str, unit: &str) -> Option<u32> {
    let at = line.find(unit)?;
    line[..at].split_whitespace().last()?.parse().ok()
}

fn quoted(line: &str) -> Option<&str> {
    let s = line.find('\'')? + 1;
    let e = s + line[s..].find('\'')?;
    Some(&line[s..e])
}

/// Parses a ptxas verbose log into per-entry resources.
pub fn parse_ptxas_log(log: &str) -> BTreeMap<String, KernelResources> {
    let mut out: BTreeMap<String, KernelResources> = BTreeMap::new();
    let mut entry: Option<String> = None; // current entry function
    let mut props_for_entry = false; // inside the entry's own "Function properties" block
    for line in log.lines() {
        if line.contains("Compiling entry function") {
            entry = quoted(line).map(str::to_string);
            props_for_entry = false;
            if let Some(e) = &entry {
                out.entry(e.clone()).or_default();
            }
        } else if let Some(rest) = line.split("Function properties for ").nth(1) {
            props_for_entry = entry.as_deref() == Some(rest.trim());
        } else if line.contains("bytes stack frame") {
            if let (true, Some(e)) = (props_for_entry, &entry) {
                let r = out.entry(e.clone()).or_default();
                r.stack_frame = number_before(line, "bytes stack frame").unwrap_or(0);
                r.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
                r.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
            }
        } else if line.contains("Used ") && line.contains(" registers") {
            if let Some(e) = &entry {
                let r = out.entry(e.clone()).or_default();
                r.registers = number_before(line, "registers").unwrap_or(0);
                r.barriers = number_before(line, "barriers").unwrap_or(0);
                r.static_smem = number_before(line, "bytes smem").unwrap_or(0);
            }
            props_for_entry = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "ptxas info    : 220 bytes gmem
ptxas info    : Compiling entry function 'k_a' for 'sm_90a'
ptxas info    : Function properties for k_a
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 71 registers, used 0 barriers
ptxas info    : Compile time = 41.688 ms
ptxas info    : Function properties for helper
ptxas         .     64 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function 'k_b' for 'sm_90a'
ptxas info    : Function properties for k_b
ptxas         .     24 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 5 barriers, 2048 bytes smem, 384 bytes cmem[0]
";

    #[test]
    fn parses_entries_and_ignores_device_functions() {
        let m = parse_ptxas_log(LOG);
        assert_eq!(m.len(), 2);
        let a = &m["k_a"];
        assert_eq!((a.registers, a.stack_frame, a.spills()), (71, 0, false));
        let b = &m["k_b"];
        assert_eq!(
            b,
            &KernelResources {
                registers: 255,
                stack_frame: 24,
                spill_stores: 16,
                spill_loads: 12,
                static_smem: 2048,
                barriers: 5
            }
        );
        assert!(b.spills());
    }
}
