//! Instruction pointers to (function, module).
//!
//! Kernel addresses resolve through `/proc/kallsyms`; user addresses through
//! the process's `/proc/<pid>/maps` and the ELF symbol table of the mapped
//! file. Rust names are demangled (legacy and v0) without their hash.

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a sample's instruction pointer was.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Symbol {
    /// Demangled function name, or `[unknown]`.
    pub function: String,
    /// `kernel`, a kernel module, or the mapped file's name.
    pub module: String,
}

/// The name used when a function cannot be found.
pub const UNKNOWN: &str = "[unknown]";

impl Symbol {
    /// An unknown function in an unknown module.
    pub fn unknown_function() -> Symbol {
        Symbol::unknown(UNKNOWN)
    }

    fn unknown(module: &str) -> Symbol {
        Symbol {
            function: UNKNOWN.into(),
            module: module.into(),
        }
    }
}

/// Demangles a Rust symbol (legacy `_ZN..E` or v0 `_R..`) without its hash;
/// anything else is returned as is.
pub fn demangle(name: &str) -> String {
    match rustc_demangle::try_demangle(name) {
        Ok(d) => format!("{d:#}"),
        Err(_) => name.to_string(),
    }
}

/// The kernel's symbol table.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// (address, name, module), sorted by address.
    syms: Vec<(u64, String, String)>,
}

impl KernelSymbols {
    /// Reads `/proc/kallsyms` (addresses are zero unless we are root).
    pub fn load() -> KernelSymbols {
        std::fs::read_to_string("/proc/kallsyms")
            .map_or_else(|_| KernelSymbols::default(), |s| KernelSymbols::parse(&s))
    }

    /// Parses kallsyms text: `addr type name [module]`, text symbols only.
    pub fn parse(text: &str) -> KernelSymbols {
        let mut syms = Vec::new();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(addr), Some(ty), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            if !matches!(ty, "t" | "T" | "w" | "W") {
                continue;
            }
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 {
                continue;
            }
            let module = it
                .next()
                .map(|m| m.trim_start_matches('[').trim_end_matches(']').to_string())
                .unwrap_or_else(|| "kernel".to_string());
            syms.push((addr, name.to_string(), module));
        }
        syms.sort_by_key(|s| s.0);
        KernelSymbols { syms }
    }

    /// Number of symbols known.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// True if kallsyms was unreadable or hidden.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The function containing `ip` (the nearest symbol at or below it).
    pub fn lookup(&self, ip: u64) -> Symbol {
        let i = self.syms.partition_point(|s| s.0 <= ip);
        if i == 0 {
            return Symbol::unknown("kernel");
        }
        let (_, name, module) = &self.syms[i - 1];
        Symbol {
            function: name.clone(),
            module: module.clone(),
        }
    }
}

/// (address, size, demangled name) of every defined function symbol.
fn text_symbols(file: &object::File<'_>) -> Vec<(u64, u64, String)> {
    file.symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && s.is_definition())
        .filter_map(|s| Some((s.address(), s.size(), demangle(s.name().ok()?))))
        .collect()
}

/// `/usr/lib/debug/.build-id/ab/cdef....debug` for build id `abcdef...`, if present.
pub fn debug_file(build_id: &[u8]) -> Option<PathBuf> {
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    if hex.len() < 3 {
        return None;
    }
    let p = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &hex[..2],
        &hex[2..]
    ));
    p.is_file().then_some(p)
}

/// One ELF file's function symbols and loadable segments.
#[derive(Debug, Default)]
pub struct ElfSymbols {
    /// (file offset, file size, virtual address) of each PT_LOAD.
    loads: Vec<(u64, u64, u64)>,
    /// (address, size, demangled name), sorted by address.
    funcs: Vec<(u64, u64, String)>,
}

impl ElfSymbols {
    /// Parses an ELF image: `.symtab` and `.dynsym`, plus the symbols of its
    /// build-id debug file when one is installed.
    pub fn parse(data: &[u8]) -> Option<ElfSymbols> {
        let file = object::File::parse(data).ok()?;
        let loads = file
            .segments()
            .filter_map(|s| {
                let (off, size) = s.file_range();
                Some((off, size, s.address())).filter(|_| size > 0)
            })
            .collect();
        let mut funcs = text_symbols(&file);
        // A stripped library (Debian's libc) keeps its full symbol table in a
        // separate debug file named by its build id (package libc6-dbg).
        if let Ok(Some(id)) = file.build_id() {
            if let Some(debug) = debug_file(id).and_then(|p| std::fs::read(p).ok()) {
                if let Ok(d) = object::File::parse(&*debug) {
                    funcs.extend(text_symbols(&d));
                }
            }
        }
        funcs.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        funcs.dedup_by_key(|f| f.0);
        Some(ElfSymbols { loads, funcs })
    }

    /// The link-time address of a file offset, through the PT_LOAD headers.
    pub fn vaddr_of_offset(&self, off: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|(o, sz, _)| off >= *o && off < o + sz)
            .map(|(o, _, va)| off - o + va)
    }

    /// The function at link-time address `vaddr`.
    pub fn lookup(&self, vaddr: u64) -> Option<&str> {
        let i = self.funcs.partition_point(|f| f.0 <= vaddr);
        let (addr, size, name) = self.funcs.get(i.checked_sub(1)?)?;
        (*size == 0 || vaddr < addr + size).then_some(name.as_str())
    }
}

/// One executable mapping of a process.
#[derive(Debug, Clone)]
struct MapEntry {
    start: u64,
    end: u64,
    offset: u64,
    path: String,
}

/// Parses `/proc/<pid>/maps` text, keeping executable mappings.
fn parse_maps(text: &str) -> Vec<MapEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if !perms.contains('x') {
            continue;
        }
        let path = it.nth(2).unwrap_or("").trim().to_string();
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset)) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        out.push(MapEntry {
            start,
            end,
            offset,
            path,
        });
    }
    out
}

fn module_name(path: &str) -> String {
    if path.is_empty() {
        return "[anon]".into();
    }
    let p = path.trim_end_matches(" (deleted)");
    Path::new(p)
        .file_name()
        .map_or_else(|| p.to_string(), |n| n.to_string_lossy().into_owned())
}

/// Resolves samples to symbols, caching kallsyms, each pid's maps and each
/// file's symbols.
#[derive(Debug)]
pub struct Symbolizer {
    kernel: KernelSymbols,
    maps: HashMap<u32, Arc<Vec<MapEntry>>>,
    files: HashMap<PathBuf, Option<Arc<ElfSymbols>>>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Symbolizer::new()
    }
}

impl Symbolizer {
    /// Loads kallsyms now; user symbols load lazily.
    pub fn new() -> Symbolizer {
        Symbolizer::with_kernel(KernelSymbols::load())
    }

    /// A symbolizer with the given kernel table (for tests).
    pub fn with_kernel(kernel: KernelSymbols) -> Symbolizer {
        Symbolizer {
            kernel,
            maps: HashMap::new(),
            files: HashMap::new(),
        }
    }

    /// The kernel table.
    pub fn kernel(&self) -> &KernelSymbols {
        &self.kernel
    }

    /// Reads and caches a process's mappings (call while it is alive).
    pub fn note_pid(&mut self, pid: u32) {
        if pid == 0 || self.maps.contains_key(&pid) {
            return;
        }
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .map(|s| parse_maps(&s))
            .unwrap_or_default();
        self.maps.insert(pid, Arc::new(maps));
    }

    /// Whether a pid's mappings are already cached.
    pub fn knows_pid(&self, pid: u32) -> bool {
        self.maps.contains_key(&pid)
    }

    fn elf(&mut self, pid: u32, m: &MapEntry) -> Option<Arc<ElfSymbols>> {
        let path = m.path.trim_end_matches(" (deleted)");
        let key = PathBuf::from(path);
        if let Some(e) = self.files.get(&key) {
            return e.clone();
        }
        // The file as we see it, else through the process's root (another
        // mount namespace), else the kernel's handle on the mapping itself.
        let candidates = [
            key.clone(),
            PathBuf::from(format!("/proc/{pid}/root{path}")),
            PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)),
        ];
        let parsed = candidates
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .and_then(|data| ElfSymbols::parse(&data))
            .map(Arc::new);
        self.files.insert(key, parsed.clone());
        parsed
    }

    /// The symbol of `ip` in process `pid` (`kernel`: the sample was taken
    /// in kernel mode).
    pub fn resolve(&mut self, pid: u32, ip: u64, kernel: bool) -> Symbol {
        if kernel || pid == 0 {
            return self.kernel.lookup(ip);
        }
        self.note_pid(pid);
        let maps = self.maps.get(&pid).cloned().unwrap_or_default();
        let Some(m) = maps.iter().find(|m| ip >= m.start && ip < m.end) else {
            return Symbol::unknown("[unknown]");
        };
        let module = module_name(&m.path);
        if !m.path.starts_with('/') {
            return Symbol::unknown(&module);
        }
        let Some(elf) = self.elf(pid, m) else {
            return Symbol::unknown(&module);
        };
        let file_off = ip - m.start + m.offset;
        match elf.vaddr_of_offset(file_off).and_then(|va| elf.lookup(va)) {
            Some(f) => Symbol {
                function: f.to_string(),
                module,
            },
            None => Symbol::unknown(&module),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn kallsyms_parsing_and_lookup() {
        let k = KernelSymbols::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81001000 t tcp_v4_rcv\n\
             ffffffff81000800 T ip_rcv\n\
             ffffffff81002000 d some_data\n\
             ffffffffc0001000 t veth_xmit\t[veth]\n",
        );
        assert_eq!(k.len(), 4);
        assert_eq!(k.lookup(0xffffffff81001010).function, "tcp_v4_rcv");
        assert_eq!(k.lookup(0xffffffff81000900).function, "ip_rcv");
        let v = k.lookup(0xffffffffc0001004);
        assert_eq!(
            (v.function.as_str(), v.module.as_str()),
            ("veth_xmit", "veth")
        );
        assert_eq!(k.lookup(0x1000).function, UNKNOWN);
    }

    #[test]
    fn demangles_rust_names() {
        assert_eq!(
            demangle("_ZN17splitnet_netfront8Netfront4poll17h0123456789abcdefE"),
            "splitnet_netfront::Netfront::poll"
        );
        assert_eq!(
            demangle("_RNvNtCs1234_22splitnet_driver_domain7netback4tick"),
            "splitnet_driver_domain::netback::tick"
        );
        assert_eq!(demangle("memcpy"), "memcpy");
    }

    #[test]
    fn maps_parsing() {
        let m = parse_maps(
            "55d0a0000000-55d0a0100000 r-xp 00002000 08:01 1234    /usr/bin/splitnet\n\
             7fff0000-7fff2000 r-xp 00000000 00:00 0                  [vdso]\n\
             7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].offset, 0x2000);
        assert_eq!(m[0].path, "/usr/bin/splitnet");
        assert_eq!(module_name(&m[1].path), "[vdso]");
    }

    #[test]
    fn resolves_a_function_in_this_test_binary() {
        let ip = a_function_to_find as *const () as usize as u64 + 1;
        let mut s = Symbolizer::with_kernel(KernelSymbols::default());
        let sym = s.resolve(std::process::id(), ip, false);
        assert!(sym.function.ends_with("a_function_to_find"), "{sym:?}");
        assert!(sym.module.starts_with("splitnet_prof"), "{sym:?}");
    }
}
