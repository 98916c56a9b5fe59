//! Hints that bring memory into the CPU's cache before it is read: for the simulator's reads
//! whose order the hardware cannot guess (a free block far down the pool, a prompt another thread
//! wrote). They change nothing the program computes.

/// Asks the CPU to bring `value` into its cache (a hint: no effect on what the program does).
#[inline]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and cannot fault; the pointer is a
    // reference's, so it is valid anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(std::ptr::from_ref(value).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Asks the CPU to bring all of `values` into its cache, a line at a time.
pub(crate) fn prefetch_slice<T>(values: &[T]) {
    let bytes = std::mem::size_of_val(values);
    let start = values.as_ptr().cast::<u8>();
    for offset in (0..bytes).step_by(64) {
        // SAFETY: in bounds of the slice.
        prefetch(unsafe { &*start.add(offset) });
    }
}
