//! The KV cache: a fixed number of blocks, reference-counted, with vLLM's prefix cache.
//!
//! As in vLLM v1's `BlockPool`: a block is held by every running sequence whose block table has
//! it; a block nobody holds is free, and if it holds a full prompt block whose hash is known, it
//! stays findable by that hash until it is handed out again. Free blocks are reused least recently
//! freed first (never-used blocks before all others); a sequence frees its blocks tail first, so
//! the end of a prompt is evicted before its beginning. Hashes chain: a block's hash covers its
//! tokens and its parent's hash, so a hit is always a whole prefix.

use std::collections::{BTreeSet, HashMap};

/// A block's index in the pool.
pub(crate) type BlockId = u32;

#[derive(Clone, Debug)]
struct Block {
    refs: u32,
    hash: Option<u64>,
    /// When it was last freed: its place in the eviction order while it is free.
    freed_at: u64,
}

/// The pool. Blocks are created lazily, so an unlimited pool costs nothing up front.
#[derive(Clone, Debug)]
pub(crate) struct KvCache {
    capacity: u64,
    blocks: Vec<Block>,
    /// Blocks nobody holds, in eviction order: (`freed_at`, id).
    free: BTreeSet<(u64, BlockId)>,
    /// Full prompt blocks by hash.
    cached: HashMap<u64, BlockId>,
    clock: u64,
}

impl KvCache {
    pub(crate) fn new(num_blocks: u32) -> Self {
        KvCache {
            capacity: u64::from(num_blocks),
            blocks: Vec::new(),
            free: BTreeSet::new(),
            cached: HashMap::new(),
            clock: 0,
        }
    }

    /// Blocks that can be handed out now: never used, or free (cached or not).
    pub(crate) fn free_blocks(&self) -> u64 {
        (self.capacity - self.blocks.len() as u64) + self.free.len() as u64
    }

    /// Blocks held by at least one sequence.
    pub(crate) fn used_blocks(&self) -> u64 {
        self.blocks.len() as u64 - self.free.len() as u64
    }

    /// The longest run of `hashes` found in the cache, from the first.
    pub(crate) fn lookup(&self, hashes: &[u64]) -> Vec<BlockId> {
        hashes.iter().map_while(|h| self.cached.get(h).copied()).collect()
    }

    /// Of `hits`, the blocks nobody holds (taking them uses up free blocks).
    pub(crate) fn free_among(&self, hits: &[BlockId]) -> u64 {
        hits.iter().filter(|&&b| self.blocks[b as usize].refs == 0).count() as u64
    }

    /// Takes a reference on each of `hits` (blocks from [`Self::lookup`]).
    pub(crate) fn touch(&mut self, hits: &[BlockId]) {
        for &b in hits {
            let block = &mut self.blocks[b as usize];
            if block.refs == 0 {
                self.free.remove(&(block.freed_at, b));
            }
            block.refs += 1;
        }
    }

    /// Hands out `n` new blocks, evicting cached ones as needed; `None` (and nothing taken) if
    /// fewer than `n` are free.
    pub(crate) fn allocate(&mut self, n: u64) -> Option<Vec<BlockId>> {
        if n > self.free_blocks() {
            return None;
        }
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let id = if (self.blocks.len() as u64) < self.capacity {
                self.blocks.push(Block { refs: 0, hash: None, freed_at: 0 });
                (self.blocks.len() - 1) as BlockId
            } else {
                let (_, id) = self.free.pop_first()?;
                if let Some(h) = self.blocks[id as usize].hash.take() {
                    if self.cached.get(&h) == Some(&id) {
                        self.cached.remove(&h);
                    }
                }
                id
            };
            self.blocks[id as usize].refs = 1;
            out.push(id);
        }
        Some(out)
    }

    /// Makes `block` findable by `hash`, unless another block already is (a duplicate computed
    /// concurrently stays uncached, as in vLLM).
    pub(crate) fn register(&mut self, block: BlockId, hash: u64) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.cached.entry(hash) {
            e.insert(block);
            self.blocks[block as usize].hash = Some(hash);
        }
    }

    /// Drops one reference on each of `blocks`, tail first.
    pub(crate) fn release(&mut self, blocks: &[BlockId]) {
        for &b in blocks.iter().rev() {
            let block = &mut self.blocks[b as usize];
            block.refs -= 1;
            if block.refs == 0 {
                self.clock += 1;
                block.freed_at = self.clock;
                self.free.insert((self.clock, b));
            }
        }
    }
}

/// The chained hashes of the full blocks of `tokens`.
pub(crate) fn block_hashes(tokens: &[u32], block_size: u32) -> Vec<u64> {
    let mut parent = 0x6A09_E667_F3BC_C908_u64;
    tokens
        .chunks_exact(block_size.max(1) as usize)
        .map(|block| {
            let mut h = parent;
            for &t in block {
                h = mix(h ^ u64::from(t));
            }
            parent = mix(h ^ block.len() as u64);
            parent
        })
        .collect()
}

/// SplitMix64's finalizer: a fixed, well-spread 64-bit mix (deterministic across builds).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
