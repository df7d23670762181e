//! Map keys of owned strings, looked up by borrowed ones: a change's namespace, name, group
//! and kind are found in the stage's maps without building (allocating) a key first. Keys
//! order and hash as the tuples they stand for, so ordered maps keep their order and hash maps
//! find what the owned key finds.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

/// Two strings: (namespace, name) or (group, kind).
pub(super) trait Two {
    fn two(&self) -> (&str, &str);
}

impl Two for (String, String) {
    fn two(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl Two for (&str, &str) {
    fn two(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> Borrow<dyn Two + 'a> for (String, String) {
    fn borrow(&self) -> &(dyn Two + 'a) {
        self
    }
}

impl Ord for dyn Two + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.two().cmp(&other.two())
    }
}

impl PartialOrd for dyn Two + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn Two + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.two() == other.two()
    }
}

impl Eq for dyn Two + '_ {}

/// As `(String, String)` hashes: `str` hashes as `String` does.
impl Hash for dyn Two + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.two().hash(state);
    }
}

/// A selector position and two strings: (position, namespace, name).
pub(super) trait Placed {
    fn placed(&self) -> (usize, &str, &str);
}

impl Placed for (usize, String, String) {
    fn placed(&self) -> (usize, &str, &str) {
        (self.0, &self.1, &self.2)
    }
}

impl Placed for (usize, &str, &str) {
    fn placed(&self) -> (usize, &str, &str) {
        (self.0, self.1, self.2)
    }
}

impl<'a> Borrow<dyn Placed + 'a> for (usize, String, String) {
    fn borrow(&self) -> &(dyn Placed + 'a) {
        self
    }
}

impl Ord for dyn Placed + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.placed().cmp(&other.placed())
    }
}

impl PartialOrd for dyn Placed + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn Placed + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.placed() == other.placed()
    }
}

impl Eq for dyn Placed + '_ {}

/// As `(usize, String, String)` hashes: `str` hashes as `String` does.
impl Hash for dyn Placed + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.placed().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn borrowed_keys_find_what_owned_keys_find_in_the_same_order() {
        let names = ["", "a", "ab", "b", "svc-1", "svc-10", "svc-2", "é"];
        let mut two = BTreeMap::new();
        let mut placed = BTreeMap::new();
        for (i, ns) in names.iter().enumerate() {
            for name in names {
                two.insert((ns.to_string(), name.to_string()), i);
                placed.insert((i % 3, ns.to_string(), name.to_string()), i);
            }
        }
        for ns in names {
            for name in names {
                let owned = (ns.to_string(), name.to_string());
                let key: &dyn Two = &(ns, name);
                assert_eq!(two.get(key), two.get(&owned));
                for position in 0..3 {
                    let owned = (position, ns.to_string(), name.to_string());
                    let key: &dyn Placed = &(position, ns, name);
                    assert_eq!(placed.get(key), placed.get(&owned));
                }
            }
        }
        let missing: &dyn Two = &("zz", "a");
        assert_eq!(two.get(missing), None);
        let hashed: rustc_hash::FxHashMap<(String, String), usize> =
            two.iter().map(|(k, v)| (k.clone(), *v)).collect();
        for (owned, value) in &two {
            let key: &dyn Two = &(owned.0.as_str(), owned.1.as_str());
            assert_eq!(hashed.get(key), Some(value));
        }
        assert_eq!(hashed.get(missing), None);
        let hashed: rustc_hash::FxHashMap<(usize, String, String), usize> =
            placed.iter().map(|(k, v)| (k.clone(), *v)).collect();
        for (owned, value) in &placed {
            let key: &dyn Placed = &(owned.0, owned.1.as_str(), owned.2.as_str());
            assert_eq!(hashed.get(key), Some(value));
        }
        // The owned order is the borrowed order.
        let keys: Vec<(&str, &str)> = two.keys().map(|k| k.two()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
    }
}
