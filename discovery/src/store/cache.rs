//! A memory-bounded cache of token states: two generations. New and used entries go to the
//! young one; when it holds half the budget it becomes the old one and the previous old one is
//! dropped whole. An entry used while old moves back to the young one. Tokens used within the
//! last half-budget of traffic therefore stay; the rest is read from storage on demand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

struct Generations<V> {
    young: HashMap<String, (Arc<V>, usize)>,
    old: HashMap<String, (Arc<V>, usize)>,
    young_bytes: usize,
    old_bytes: usize,
}

pub struct Cache<V> {
    gens: Mutex<Generations<V>>,
    /// Bytes one generation may hold before it ages.
    half: usize,
}

impl<V> Cache<V> {
    pub fn new(budget_bytes: u64) -> Self {
        let budget = usize::try_from(budget_bytes).unwrap_or(usize::MAX);
        Self {
            gens: Mutex::new(Generations {
                young: HashMap::new(),
                old: HashMap::new(),
                young_bytes: 0,
                old_bytes: 0,
            }),
            half: (budget / 2).max(1),
        }
    }

    pub fn get(&self, key: &str) -> Option<Arc<V>> {
        let mut g = self.gens.lock().ok()?;
        if let Some((v, _)) = g.young.get(key) {
            return Some(v.clone());
        }
        let (v, size) = g.old.remove(key)?;
        g.old_bytes = g.old_bytes.saturating_sub(size);
        let out = v.clone();
        Self::put_young(&mut g, self.half, key.to_string(), v, size);
        Some(out)
    }

    /// Inserts (or replaces) `key`, estimated at `size` bytes.
    pub fn insert(&self, key: &str, value: Arc<V>, size: usize) {
        if let Ok(mut g) = self.gens.lock() {
            Self::take(&mut g, key);
            Self::put_young(&mut g, self.half, key.to_string(), value, size);
        }
    }

    /// `key` grew by `delta` bytes (a write applied to a cached state).
    pub fn grew(&self, key: &str, delta: usize) {
        let Ok(mut g) = self.gens.lock() else {
            return;
        };
        if let Some(entry) = g.young.get_mut(key) {
            entry.1 += delta;
            g.young_bytes += delta;
        } else if let Some(entry) = g.old.get_mut(key) {
            entry.1 += delta;
            g.old_bytes += delta;
        }
        if g.young_bytes > self.half {
            Self::age(&mut g);
        }
    }

    pub fn remove(&self, key: &str) {
        if let Ok(mut g) = self.gens.lock() {
            Self::take(&mut g, key);
        }
    }

    /// (estimated bytes, entries) held now.
    pub fn usage(&self) -> (u64, u64) {
        self.gens
            .lock()
            .map(|g| {
                (
                    (g.young_bytes + g.old_bytes) as u64,
                    (g.young.len() + g.old.len()) as u64,
                )
            })
            .unwrap_or((0, 0))
    }

    fn take(g: &mut Generations<V>, key: &str) {
        if let Some((_, size)) = g.young.remove(key) {
            g.young_bytes = g.young_bytes.saturating_sub(size);
        }
        if let Some((_, size)) = g.old.remove(key) {
            g.old_bytes = g.old_bytes.saturating_sub(size);
        }
    }

    fn put_young(g: &mut Generations<V>, half: usize, key: String, value: Arc<V>, size: usize) {
        g.young.insert(key, (value, size));
        g.young_bytes += size;
        if g.young_bytes > half {
            Self::age(g);
        }
    }

    fn age(g: &mut Generations<V>) {
        g.old = std::mem::take(&mut g.young);
        g.old_bytes = std::mem::take(&mut g.young_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_its_budget_and_keeps_what_is_used() {
        let cache: Cache<u32> = Cache::new(1000);
        for i in 0..100u32 {
            cache.insert(&format!("k{i}"), Arc::new(i), 100);
            // k0 is used all the time, so it never ages out.
            assert_eq!(cache.get("k0").map(|v| *v), Some(0));
            let (bytes, _) = cache.usage();
            assert!(bytes <= 1100, "{bytes}");
        }
        assert!(cache.get("k1").is_none(), "an unused entry ages out");
        assert_eq!(cache.get("k99").map(|v| *v), Some(99));
        cache.remove("k99");
        assert!(cache.get("k99").is_none());
    }
}
