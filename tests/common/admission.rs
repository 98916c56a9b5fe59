//! vLLM's two admission modes (`engine.vllm.admission`), for the tests that run once per mode.
//! Included with `#[macro_use] #[path]` by the vLLM tests.

use batchlab::engine::python::vllm::Admission;

/// The `--set`s that select `admission` for `batchlab run`: continuous admission hands each
/// request over as it arrives (`batch_size = 1`), up to 256 in vLLM at once.
#[allow(dead_code)]
pub fn sets(admission: Admission) -> Vec<&'static str> {
    match admission {
        Admission::Batch => vec![],
        Admission::Continuous => vec![
            "--set",
            "engine.vllm.admission=continuous",
            "--set",
            "batching.batch_size=1",
            "--set",
            "batching.max_in_flight=256",
        ],
    }
}

/// `#[test] fn batch()` and `#[test] fn continuous()` in a module named after each test function
/// (`name::batch`, `name::continuous`), each calling it with its admission.
macro_rules! both_admissions {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn batch() {
                super::$name(batchlab::engine::python::vllm::Admission::Batch)
            }
            #[test]
            fn continuous() {
                super::$name(batchlab::engine::python::vllm::Admission::Continuous)
            }
        }
    )*};
}
