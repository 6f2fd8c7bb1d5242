//! Where a key lives: Apache Kafka's default partitioner for keyed records (murmur2, as the Java
//! clients compute it), so driftline and any producer following the documentation agree, and the
//! detectors can tell which partition a key's state belongs to.

/// Kafka's `Utils.murmur2` (seed 0x9747b28c) over the key's bytes.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h: u32 = 0x9747_b28c ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's producers (and driftline's, `partitioner = murmur2_random`) pick for a key.
pub fn partition_for_key(key: &str, partitions: u32) -> u32 {
    ((murmur2(key.as_bytes()) as u32) & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by `org.apache.kafka.common.utils.Utils` (kafka-clients 4.4.0).
    #[test]
    fn the_java_clients_values() {
        for (key, hash, of_4, of_12) in [
            ("", 275_646_681, 1, 9),
            ("a", -1_563_381_124, 0, 4),
            ("ab", 316_155_434, 2, 2),
            ("abc", 479_470_107, 3, 3),
            ("abcd", -1_323_649_548, 0, 8),
            ("default/kafka-ext-mcp/tool_1", -809_637_983, 1, 9),
            ("default/search-mcp", -159_896_233, 3, 7),
            ("p/s/é漢", 1_963_181_174, 2, 2),
        ] {
            assert_eq!(murmur2(key.as_bytes()), hash, "{key:?}");
            assert_eq!(partition_for_key(key, 4), of_4, "{key:?}");
            assert_eq!(partition_for_key(key, 12), of_12, "{key:?}");
        }
    }
}
