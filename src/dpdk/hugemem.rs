//! Memory for registered memory regions: 2 MiB hugepages when the kernel has
//! them (mmap MAP_HUGETLB), otherwise normal pages, with one log line saying
//! which.
#![cfg(feature = "dpdk")]

use super::error::{Error, Result};

const HUGE_PAGE: usize = 2 << 20;

/// A zeroed, page-aligned memory block owned by this value.
pub struct HugeMem {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    map_len: usize,
    huge: bool,
}

// SAFETY: HugeMem owns its mapping exclusively, like a Box<[u8]>.
unsafe impl Send for HugeMem {}
// SAFETY: shared references only read; mutation needs &mut.
unsafe impl Sync for HugeMem {}

impl HugeMem {
    /// Maps `len` bytes (rounded up to whole pages), on hugepages if possible.
    pub fn new(len: usize) -> Result<HugeMem> {
        if len == 0 {
            return Err(Error::Invalid("a memory region of 0 bytes".into()));
        }
        let huge_len = len.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        if let Some(ptr) = map(huge_len, libc::MAP_HUGETLB) {
            return Ok(HugeMem {
                ptr,
                len,
                map_len: huge_len,
                huge: true,
            });
        }
        let page = 4096;
        let map_len = len.div_ceil(page) * page;
        // Said once per process: a tool registers several regions.
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            log::info!(
                "no free hugepages for a {len}-byte region ({}): using normal pages (said once)",
                std::io::Error::last_os_error()
            );
        }
        let ptr = map(map_len, 0).ok_or_else(|| {
            Error::Memory(format!(
                "mmap of {map_len} bytes: {}",
                std::io::Error::last_os_error()
            ))
        })?;
        Ok(HugeMem {
            ptr,
            len,
            map_len,
            huge: false,
        })
    }

    /// Whether the block sits on hugepages.
    pub fn is_huge(&self) -> bool {
        self.huge
    }

    /// Length in bytes, as asked for (the mapping may be longer).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block is zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The block's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping holds len initialised (zeroed) bytes for our lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The block's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

fn map(len: usize, extra_flags: libc::c_int) -> Option<std::ptr::NonNull<u8>> {
    // SAFETY: an anonymous private mapping with no address hint; the result
    // is checked for MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        None
    } else {
        std::ptr::NonNull::new(p as *mut u8)
    }
}

impl Drop for HugeMem {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in new(); nothing borrows it
        // any more (borrows end before drop).
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_is_zeroed_writable_and_sized() {
        let mut m = HugeMem::new(10_000).unwrap();
        assert_eq!(m.len(), 10_000);
        assert!(m.as_slice().iter().all(|&b| b == 0));
        m.as_mut_slice()[9_999] = 7;
        assert_eq!(m.as_slice()[9_999], 7);
        assert!(HugeMem::new(0).is_err());
    }
}
