//! The kernels of a packed solution: each module its tables name, compiled for sm_90a by the library's own NVRTC
//! compile (`kernels::report::compile_module`: the registry's module source and defines, the options and disk
//! cache every gdn process uses, so the bytes are those gdn loads on an H100 / H200), written as base64 text in
//! `gdn_cubin.cpp` (a C++ source the harness compiles with its host compiler) with each module's length and SHA-256.

use gdn_cuda::kernels::registry::{Module, SM90A};
use gdn_cuda::kernels::report::compile_module;
use gdn_cuda::kernels::sources::SourceSet;
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// One compiled module.
pub struct Cubin {
    pub module: &'static Module,
    pub bytes: Vec<u8>,
}

impl Cubin {
    pub fn sha256(&self) -> String {
        hex(&Sha256::digest(&self.bytes))
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Compiles `modules` for sm_90a (through gdn's disk cache of NVRTC output) from the sources gdn compiles: the
/// embedded ones, or `$GDN_KERNEL_DIR`'s when that is set.
pub fn compile(modules: &[&'static Module]) -> Result<Vec<Cubin>, String> {
    let sources = SourceSet::load()?;
    modules
        .iter()
        .map(|m| {
            let r = compile_module(&sources, m, SM90A);
            match r.compiled {
                Some(Ok(c)) => Ok(Cubin {
                    module: m,
                    bytes: c.cubin,
                }),
                Some(Err(e)) => Err(format!("compiling module {} for sm_90a: {e}", m.id)),
                None => Err(format!("module {} was not compiled", m.id)),
            }
        })
        .collect()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes() {
        if c == b'=' {
            break;
        }
        let v = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Base64 characters per line of `gdn_cubin.cpp`.
const LINE: usize = 120;

/// `gdn_cubin.cpp`: `gdn_pack_module_base64[i]` and `gdn_pack_module_bytes[i]` for module i.
pub fn source(definition: &str, cubins: &[Cubin]) -> String {
    let mut o = format!(
        "// gdn_cubin.cpp: written by `gdn pack` for {definition}: gdn's kernel modules compiled for sm_90a by NVRTC, as\n\
         // base64 (loaded by gdn_host.h with cudaLibraryLoadData). Do not edit.\n"
    );
    for (i, c) in cubins.iter().enumerate() {
        let _ = writeln!(
            o,
            "// module {i}: {} ({}{}), {} bytes, sha256 {}",
            c.module.id,
            c.module.source,
            if c.module.defines.is_empty() {
                String::new()
            } else {
                format!(" -D{}", c.module.defines.join(" -D"))
            },
            c.bytes.len(),
            c.sha256()
        );
        let _ = writeln!(o, "static const char gdn_pack_module_{i}[] =");
        let text = base64(&c.bytes);
        for line in text.as_bytes().chunks(LINE) {
            let _ = writeln!(o, "    \"{}\"", std::str::from_utf8(line).unwrap());
        }
        o.push_str("    ;\n");
    }
    o.push_str(
        "// hidden: each solution library binds its own (gdn_host.h)\n\
         extern \"C\" __attribute__((visibility(\"hidden\"))) const char* const gdn_pack_module_base64[] = {",
    );
    for i in 0..cubins.len() {
        let _ = write!(o, "gdn_pack_module_{i}, ");
    }
    o.push_str(
        "nullptr};\nextern \"C\" __attribute__((visibility(\"hidden\"))) const unsigned long long \
         gdn_pack_module_bytes[] = {",
    );
    for c in cubins {
        let _ = write!(o, "{}ull, ", c.bytes.len());
    }
    o.push_str("0ull};\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for n in 0..10 {
            let data: Vec<u8> = (0..n as u8).map(|x| x.wrapping_mul(37)).collect();
            assert_eq!(base64_decode(&base64(&data)).unwrap(), data);
        }
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
    }
}
