//! With the `vllm` feature, records libpython's directory as the binary's rpath: without it the
//! binary loads whichever libpython3.x the system linker finds first (Debian's, not the venv's).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "vllm")]
    pyo3_build_config::add_libpython_rpath_link_args();
}
