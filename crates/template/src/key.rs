//! A map key for lookups in JSON objects that compares inline: the objects are sorted maps (ADR
//! 0011) whose tree search orders keys through `Ord`, and `str`'s `Ord` calls `memcmp` for every
//! key it passes. Template field names and Kubernetes keys are short and usually differ in their
//! first bytes, so a byte loop decides sooner. Not a general string type.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

/// A borrowed key ordered, compared and hashed exactly as `str` is.
#[repr(transparent)]
#[derive(Debug)]
pub struct Key(str);

impl Key {
    pub fn new(s: &str) -> &Key {
        // SAFETY: `Key` is a `repr(transparent)` wrapper of `str`, so the pointer cast keeps
        // layout and metadata; the lifetime is the input's.
        unsafe { &*(s as *const str as *const Key) }
    }
}

impl Borrow<Key> for String {
    fn borrow(&self) -> &Key {
        Key::new(self)
    }
}

impl PartialEq for Key {
    #[inline]
    fn eq(&self, other: &Key) -> bool {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    #[inline]
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    /// Byte-wise lexicographic order, the order of `str`: the first bytes decide most
    /// comparisons without a call.
    #[inline]
    fn cmp(&self, other: &Key) -> Ordering {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        match (a.first(), b.first()) {
            (Some(x), Some(y)) if x != y => x.cmp(y),
            _ => compare_bytes(a, b),
        }
    }
}

/// `a.cmp(b)` without the call to `memcmp` that slices make: keys that share a first byte
/// (`name`/`namespace`, and the key being looked up when it is found) are compared eight, then
/// four bytes at a time, as big-endian words, which order as their bytes do.
#[inline]
fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    let (mut x, mut y) = (&a[..n], &b[..n]);
    while let (Some((wx, rx)), Some((wy, ry))) =
        (x.split_first_chunk::<8>(), y.split_first_chunk::<8>())
    {
        let (wx, wy) = (u64::from_be_bytes(*wx), u64::from_be_bytes(*wy));
        if wx != wy {
            return wx.cmp(&wy);
        }
        (x, y) = (rx, ry);
    }
    // Four bytes as one word: `name`, `port`, `spec` and the like in one comparison.
    if let (Some((wx, rx)), Some((wy, ry))) =
        (x.split_first_chunk::<4>(), y.split_first_chunk::<4>())
    {
        let (wx, wy) = (u32::from_be_bytes(*wx), u32::from_be_bytes(*wy));
        if wx != wy {
            return wx.cmp(&wy);
        }
        (x, y) = (rx, ry);
    }
    for (p, q) in x.iter().zip(y) {
        if p != q {
            return p.cmp(q);
        }
    }
    a.len().cmp(&b.len())
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::Key;

    #[test]
    fn orders_and_compares_as_str() {
        let words = [
            "",
            "a",
            "ab",
            "abc",
            "b",
            "ba",
            "name",
            "namespace",
            "nam",
            "é",
            "z",
            "creationTimestamp",
            "creationTimestampX",
            "creationTimestamq",
            "creationTimest",
            "resourceVersion",
            "resourceVersioN",
            "targetPort",
            "targetPor",
            "targetPortX",
            "port",
            "porT",
            "ports",
            "spec",
            "spe",
            "abcdefghijkl",
            "abcdefghijkm",
            "abcdefghijk",
        ];
        for x in words {
            for y in words {
                assert_eq!(Key::new(x).cmp(Key::new(y)), x.cmp(y), "{x:?} vs {y:?}");
                assert_eq!(Key::new(x) == Key::new(y), x == y, "{x:?} vs {y:?}");
            }
        }
    }

    #[test]
    fn finds_keys_in_json_objects() {
        let json: serde_json::Value =
            serde_json::json!({"name": 1, "namespace": 2, "labels": 3, "annotations": 4});
        let map = json.as_object().expect("object");
        for (k, v) in map {
            assert_eq!(map.get(Key::new(k)), Some(v));
        }
        assert_eq!(map.get(Key::new("nam")), None);
        assert_eq!(map.get(Key::new("namespaces")), None);
    }
}
