//! The files a lowering reads (a calibration profile, a chat template, a trace), kept by path
//! in the plan's source: a changed plan is lowered again from what the first lowering read, so a
//! change does no IO, and every plan of one source sees the same content.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// What the lowerings of one source read, by path. Clones share it: a plan and every plan
/// changed from it.
#[derive(Clone, Default)]
pub(crate) struct Files(Arc<Mutex<HashMap<PathBuf, Arc<[u8]>>>>);

impl Files {
    /// The content of the file at `path`: what a lowering of this source read before, else read
    /// now (and kept). A file that cannot be read is not kept: the lowering fails on it.
    pub(crate) fn bytes(&self, path: &Path) -> io::Result<Arc<[u8]>> {
        // Held while reading, so that lowerings on several threads read a file once.
        let mut kept = lock(&self.0);
        if let Some(bytes) = kept.get(path) {
            return Ok(Arc::clone(bytes));
        }
        let bytes: Arc<[u8]> = read(path)?.into();
        kept.insert(path.to_path_buf(), Arc::clone(&bytes));
        Ok(bytes)
    }

    /// [`Files::bytes`] as text, refused as `std::fs::read_to_string` refuses it when not UTF-8.
    pub(crate) fn text(&self, path: &Path) -> io::Result<String> {
        String::from_utf8(self.bytes(path)?.to_vec())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How often each path was read from disk by a lowering, ever (for the check that a workflow's
/// changes read no file again).
static DISK_READS: Mutex<BTreeMap<PathBuf, usize>> = Mutex::new(BTreeMap::new());

/// The one place a lowering reads a file from disk.
fn read(path: &Path) -> io::Result<Vec<u8>> {
    *lock(&DISK_READS).entry(path.to_path_buf()).or_default() += 1;
    std::fs::read(path)
}

/// How often a lowering read `path` from disk so far, in this process.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn disk_reads(path: &Path) -> usize {
    lock(&DISK_READS).get(path).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file is read from disk once per source: later reads (a clone's too) see the kept
    /// content, even after the file changed or went away.
    #[test]
    fn a_file_is_read_once_and_kept() {
        let dir = std::env::temp_dir().join(format!("batchlab-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kept.txt");
        std::fs::write(&path, "first").unwrap();
        let files = Files::default();
        assert_eq!(files.text(&path).unwrap(), "first");
        std::fs::write(&path, "second").unwrap();
        assert_eq!(files.clone().text(&path).unwrap(), "first", "a clone shares what was read");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&*files.bytes(&path).unwrap(), b"first");
        assert_eq!(disk_reads(&path), 1);
        // Another source reads it again: the file is gone.
        assert!(Files::default().bytes(&path).is_err());
        assert_eq!(disk_reads(&path), 2);
        std::fs::write(&path, [0xff_u8]).unwrap();
        let e = Files::default().text(&path).unwrap_err();
        assert_eq!(e.to_string(), std::fs::read_to_string(&path).unwrap_err().to_string());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
