//! The KV cache: a fixed number of blocks, reference-counted, with vLLM's prefix cache.
//!
//! As in vLLM v1's `BlockPool`: a block is held by every running sequence whose block table has
//! it; a block nobody holds is free, and if it holds a full prompt block whose hash is known, it
//! stays findable by that hash until it is handed out again. Free blocks are reused least recently
//! freed first (never-used blocks before all others); a sequence frees its blocks tail first, so
//! the end of a prompt is evicted before its beginning. Hashes chain: a block's hash covers its
//! tokens and its parent's hash, so a hit is always a whole prefix.

use std::collections::VecDeque;
use std::num::NonZeroU64;

use hashbrown::HashTable;

use super::prefetch::prefetch;

/// A block's index in the pool.
pub(crate) type BlockId = u32;

/// 16 bytes, four to a cache line: the pool is read in eviction order, which is the pool's in no
/// useful way, so the less room it takes the more of it stays in the cache.
#[derive(Clone, Debug)]
struct Block {
    /// Its prefix-cache hash while it is findable (hashes are never 0: see [`block_hashes`]).
    hash: Option<NonZeroU64>,
    refs: u32,
    /// How often it was freed, wrapping: which of its entries in the free queue is live (see
    /// `KvCache::free`).
    freed_at: u32,
}

/// The pool. Blocks are created lazily, so an unlimited pool costs nothing up front.
#[derive(Clone, Debug)]
pub(crate) struct KvCache {
    capacity: u64,
    blocks: Vec<Block>,
    /// Blocks nobody holds, in eviction order: (`freed_at`, id). A block freed is pushed at the
    /// back, the oldest popped at the front. A block taken back out of the middle (a prefix hit
    /// on a free block) stays in the queue as a stale entry, skipped when it reaches the front:
    /// its `freed_at` no longer matches, or it is held again.
    ///
    /// `freed_at` counts a block's frees in 32 bits, wrapping, and that is exact. A stale entry
    /// of block `b` could pass for live only after 2^32 more frees of `b` while it is queued.
    /// Each of them needs `b` taken first: by a pop, which would pop this older entry first, or
    /// by a prefix hit, which leaves another stale entry of `b` behind it. So that many frees
    /// would leave 2^32 stale entries queued, but they are dropped as soon as they outnumber the
    /// live ones by 64 ([`Self::release`]), and live ones are at most the pool's blocks: 2^32 - 64
    /// of them, at 16 bytes each, would take 64 GiB.
    free: VecDeque<(u32, BlockId)>,
    /// How many blocks nobody holds (the live entries of `free`).
    free_count: u64,
    /// Full prompt blocks findable by hash: the blocks whose `hash` is set, and only those. The
    /// table holds block ids alone (a block's hash is in the block), so it is a quarter the size
    /// of a map from hash to id and stays in the cache; the hashes are already well mixed (see
    /// [`block_hashes`]), so they index it as they are.
    cached: HashTable<BlockId>,
}

impl KvCache {
    pub(crate) fn new(num_blocks: u32) -> Self {
        KvCache {
            capacity: u64::from(num_blocks),
            blocks: Vec::new(),
            free: VecDeque::new(),
            free_count: 0,
            cached: HashTable::new(),
        }
    }

    /// Blocks that can be handed out now: never used, or free (cached or not).
    pub(crate) fn free_blocks(&self) -> u64 {
        (self.capacity - self.blocks.len() as u64) + self.free_count
    }

    /// Blocks held by at least one sequence.
    pub(crate) fn used_blocks(&self) -> u64 {
        self.blocks.len() as u64 - self.free_count
    }

    /// The longest run of `hashes` found in the cache, from the first.
    #[cfg(test)]
    pub(crate) fn lookup(&self, hashes: &[u64]) -> Vec<BlockId> {
        let mut hits = Vec::new();
        self.lookup_into(hashes, &mut hits);
        hits
    }

    /// [`Self::lookup`], appending the blocks to `out` (a block table kept from an earlier
    /// sequence: no list of its own per lookup).
    pub(crate) fn lookup_into(&self, hashes: &[u64], out: &mut Vec<BlockId>) {
        out.extend(hashes.iter().map_while(|&h| self.find(h)));
    }

    /// The block findable by `hash`, if any.
    fn find(&self, hash: u64) -> Option<BlockId> {
        self.cached.find(hash, |&id| hash_of(&self.blocks, id) == hash).copied()
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
                // Its queue entry goes stale (see `free`).
                self.free_count -= 1;
            }
            block.refs += 1;
        }
    }

    /// Hands out `n` new blocks, evicting cached ones as needed; `None` (and nothing taken) if
    /// fewer than `n` are free.
    #[cfg(test)]
    pub(crate) fn allocate(&mut self, n: u64) -> Option<Vec<BlockId>> {
        let mut out = Vec::new();
        self.allocate_into(n, &mut out).then_some(out)
    }

    /// [`Self::allocate`], appending the blocks to `out` (a sequence's block table: no list of
    /// its own per allocation); `false` (and nothing taken) if fewer than `n` are free.
    pub(crate) fn allocate_into(&mut self, n: u64, out: &mut Vec<BlockId>) -> bool {
        if n > self.free_blocks() {
            return false;
        }
        out.reserve(n as usize);
        for _ in 0..n {
            let id = if (self.blocks.len() as u64) < self.capacity {
                self.blocks.push(Block { hash: None, refs: 0, freed_at: 0 });
                (self.blocks.len() - 1) as BlockId
            } else {
                let id = self.pop_free().expect("the free blocks were counted");
                if let Some(h) = self.blocks[id as usize].hash.take() {
                    // Found by its id: the table's entries are compared without reading a block.
                    let entry = self.cached.find_entry(h.get(), |&other| other == id);
                    entry.expect("a block with a hash is in the table").remove();
                }
                id
            };
            self.blocks[id as usize].refs = 1;
            out.push(id);
        }
        true
    }

    /// Makes `block` findable by `hash`, unless another block already is (a duplicate computed
    /// concurrently stays uncached, as in vLLM). A hash of 0 is never cached ([`block_hashes`]
    /// gives none).
    pub(crate) fn register(&mut self, block: BlockId, hash: u64) {
        debug_assert!(self.blocks[block as usize].hash.is_none(), "a block is registered once per allocation");
        let Some(key) = NonZeroU64::new(hash) else { return };
        let blocks = &self.blocks;
        let same = |&id: &BlockId| hash_of(blocks, id) == hash;
        let rehash = |&id: &BlockId| hash_of(blocks, id);
        if let hashbrown::hash_table::Entry::Vacant(e) = self.cached.entry(hash, same, rehash) {
            e.insert(block);
            self.blocks[block as usize].hash = Some(key);
        }
    }

    /// Drops one reference on each of `blocks`, tail first.
    pub(crate) fn release(&mut self, blocks: &[BlockId]) {
        for &b in blocks.iter().rev() {
            let block = &mut self.blocks[b as usize];
            block.refs -= 1;
            if block.refs == 0 {
                block.freed_at = block.freed_at.wrapping_add(1);
                self.free.push_back((block.freed_at, b));
                self.free_count += 1;
            }
        }
        // Stale entries are at most as many as live ones (plus a little): memory stays in
        // proportion to the pool, however long the run, at O(1) amortized per release.
        if self.free.len() as u64 > 2 * self.free_count + 64 {
            let blocks = &self.blocks;
            self.free
                .retain(|&(freed_at, id)| blocks[id as usize].refs == 0 && blocks[id as usize].freed_at == freed_at);
        }
    }

    /// The least recently freed block nobody holds, taken off the queue; stale entries are
    /// dropped on the way.
    fn pop_free(&mut self) -> Option<BlockId> {
        // The queue's order is the pool's in no useful way, so each block read here is a cache
        // miss: ask for the one a few places back now, and it is there by its turn.
        if let Some(&(_, ahead)) = self.free.get(PREFETCH_AHEAD) {
            prefetch(&self.blocks[ahead as usize]);
        }
        while let Some((freed_at, id)) = self.free.pop_front() {
            let block = &self.blocks[id as usize];
            if block.refs == 0 && block.freed_at == freed_at {
                self.free_count -= 1;
                return Some(id);
            }
        }
        None
    }
}

/// Block `id`'s hash while it is findable, else 0 (which no block hash is).
fn hash_of(blocks: &[Block], id: BlockId) -> u64 {
    blocks[id as usize].hash.map_or(0, NonZeroU64::get)
}

/// How many places down the free queue [`KvCache::pop_free`] fetches a block before its turn.
const PREFETCH_AHEAD: usize = 8;

/// The chained hashes of the full blocks of `tokens`: a block's hash covers its tokens, its
/// length and every block before it, so equal hashes mean equal prefixes (up to a 64-bit
/// collision). It runs for every prompt block of every request, so it is built for speed:
/// - each block's content is hashed on its own ([`block_content`]), so the blocks of a prompt
///   are hashed side by side rather than one after another;
/// - the chain from block to block is one cheap, invertible step (an odd multiply and a rotation:
///   no two parents or two contents give one link);
/// - the key a block is cached under is that link folded by one wide multiply, off the chain's
///   path.
pub(crate) fn block_hashes(tokens: &[u32], block_size: u32) -> Vec<u64> {
    let block_size = block_size.max(1) as usize;
    let mut hashes = Vec::with_capacity(tokens.len() / block_size);
    let mut link = 0x6A09_E667_F3BC_C908_u64;
    for block in tokens.chunks_exact(block_size) {
        link = (link ^ block_content(block)).wrapping_mul(CHAIN_KEY).rotate_left(29);
        // Never 0, which the cache reads as no hash (a 0 in 2^64 becomes 1).
        hashes.push(fold(link ^ SECRETS[3], CHAIN_KEY).max(1));
    }
    hashes
}

/// A hash of one block's tokens and length, wyhash's way: four tokens (two 64-bit words) at a
/// time through one 64 × 64 → 128-bit multiply ([`fold`]), each folding in the state before it.
fn block_content(block: &[u32]) -> u64 {
    let word = |low: u32, high: u32| u64::from(low) | (u64::from(high) << 32);
    // The length is in the state from the start, so a missing token is never taken for a 0.
    let mut state = SECRETS[0] ^ block.len() as u64;
    let mut quads = block.chunks_exact(4);
    for quad in &mut quads {
        let [a, b, c, d]: [u32; 4] = quad.try_into().expect("chunks of four");
        state = fold(word(a, b) ^ SECRETS[1], word(c, d) ^ state);
    }
    let rest = quads.remainder();
    if rest.is_empty() {
        return fold(SECRETS[2], state);
    }
    let token = |i: usize| rest.get(i).copied().unwrap_or(0);
    fold(word(token(0), token(1)) ^ SECRETS[2], word(token(2), 0) ^ state)
}

/// The 128-bit product of `a` and `b`, its halves xor-ed: every input bit reaches every output
/// bit in one multiply. (A factor of 0 would lose the other: the secrets xor-ed into token words
/// have the top bit of both halves set, which no token id below 2^31 cancels.)
fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

/// An odd constant, so multiplying by it is invertible (xxHash's first 64-bit prime).
const CHAIN_KEY: u64 = 0x9E37_79B1_85EB_CA87;

/// Keys for [`block_content`] and the cache key (wyhash's secrets, with the top bit of each
/// 32-bit half set).
const SECRETS: [u64; 4] = [0xA076_1D64_78BD_642F, 0xE703_7ED1_A0B4_28DB, 0x8EBC_6AF0_9C88_C6E3, 0xD89A_3A3D_E1F2_BD73];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_token_of_a_block_is_in_its_hash() {
        // Blocks of every length up to two quads and a remainder: changing any one token, or
        // the length, changes the hash.
        for len in 1..=11u32 {
            let block: Vec<u32> = (0..len).map(|t| 1000 + t).collect();
            let base = block_content(&block);
            for i in 0..block.len() {
                let mut other = block.clone();
                other[i] += 1;
                assert_ne!(block_content(&other), base, "length {len}, token {i}");
            }
            let mut longer = block.clone();
            longer.push(0);
            assert_ne!(block_content(&longer), base, "length {len} and a trailing 0");
        }
        // Whole prompts: a hash covers its block and every block before it.
        let tokens: Vec<u32> = (0..48).collect();
        let mut changed = tokens.clone();
        changed[3] = 99;
        let (a, b) = (block_hashes(&tokens, 16), block_hashes(&changed, 16));
        assert!(a.iter().zip(&b).all(|(x, y)| x != y), "a change in the first block changes every hash after it");
        assert_eq!(block_hashes(&tokens[..32], 16), a[..2], "a prefix has its own blocks' hashes");
    }

    #[test]
    fn an_evicted_block_is_no_hit_and_the_map_holds_only_cached_blocks() {
        let mut kv = KvCache::new(4);
        let a = kv.allocate(1).unwrap();
        kv.register(a[0], 11);
        kv.release(&a);
        assert_eq!(kv.lookup(&[11]), a, "a free block stays findable");
        // Four more blocks: the cached one is handed out again, so its hash is gone.
        let all = kv.allocate(4).unwrap();
        assert!(kv.lookup(&[11]).is_empty(), "evicted");
        assert_eq!(kv.free_among(&all), 0);
        // The same hash on another block is live again.
        kv.register(all[3], 11);
        assert_eq!(kv.lookup(&[11]), vec![all[3]]);
        // A duplicate of a live hash stays uncached.
        kv.register(all[2], 11);
        assert_eq!(kv.lookup(&[11]), vec![all[3]]);
        kv.release(&all);
        // Many evictions: the map never holds more entries than the pool has blocks.
        for round in 0..10_000u64 {
            let b = kv.allocate(4).unwrap();
            for (i, &id) in b.iter().enumerate() {
                kv.register(id, 1000 + round * 4 + i as u64);
            }
            kv.release(&b);
            assert!(kv.cached.len() <= 4, "{} entries", kv.cached.len());
        }
        let last = 1000 + 9_999 * 4;
        assert_eq!(kv.lookup(&[last, last + 1]).len(), 2, "the latest blocks are still cached");
        assert!(kv.lookup(&[last - 4]).is_empty(), "older ones were evicted");
    }
}
