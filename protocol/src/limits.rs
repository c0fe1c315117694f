//! The documented range of every number and size a user sends with a goal, in one place:
//! what `goal::parse` accepts, what `kernelctl` reads, and the words of the error when a
//! value is outside (which always names the field and its range).
//!
//! The ranges are far beyond any real goal and small enough that nothing derived from them
//! overflows or grows without bound: a name is shown in every `status` line, an iteration
//! budget sizes the log, and stop values are compared with measured speedups.

use std::ops::RangeInclusive;

/// Bytes of a goal's name (it appears in every status line and every event of the goal).
pub const NAME_BYTES: RangeInclusive<usize> = 1..=128;
/// Bytes of a goal file, checked by `kernelctl` before it reads the file and by the daemon.
pub const GOAL_FILE_BYTES: u64 = 1 << 20;
/// `budget.iterations`: a million evaluations is years of GPU time.
pub const ITERATIONS: RangeInclusive<i64> = 1..=1_000_000;
/// `stop.plateau`: iterations without improvement before a goal completes.
pub const PLATEAU: RangeInclusive<i64> = 1..=1_000_000;
/// `budget.gpu_hours`: above 0, at most ~11 GPU-years.
pub const GPU_HOURS_MAX: f64 = 100_000.0;
/// `stop.target_speedup`: above 0, at most a million times the baseline.
pub const TARGET_SPEEDUP_MAX: f64 = 1_000_000.0;
/// `budget.tokens`: a trillion tokens is far beyond any night's endpoint bill.
pub const TOKENS: RangeInclusive<i64> = 1..=1_000_000_000_000;
/// `budget.cost`: above 0, at most a billion (in the endpoint's currency).
pub const COST_MAX: f64 = 1_000_000_000.0;
/// `budget.price_per_1k_tokens`: above 0, at most a thousand per thousand tokens.
pub const PRICE_PER_1K_TOKENS_MAX: f64 = 1_000.0;
/// Seed candidates one goal names (each one distinct): a goal starts from a few.
pub const SEEDS: RangeInclusive<usize> = 1..=16;
/// The goal as the daemon keeps it (its spec with the seeds' text, as JSON): it is the
/// goal's first event, which `events` and `show` send whole to whoever asks, so it must
/// stay far below a reply line (`wire::MAX_LINE`, 8 MiB) whatever the goal file says.
pub const GOAL_STORED_BYTES: usize = 2 << 20;

/// An integer within its range, or the error that names both.
pub fn int_in(field: &str, value: i64, range: &RangeInclusive<i64>) -> Result<u64, String> {
    if range.contains(&value) {
        Ok(value as u64)
    } else {
        Err(format!(
            "`{field}` must be between {} and {} (got {value})",
            range.start(),
            range.end()
        ))
    }
}

/// A number above 0 and at most `max`, or the error that names the range.
pub fn positive_at_most(field: &str, value: f64, max: f64, example: &str) -> Result<f64, String> {
    if value.is_finite() && value > 0.0 && value <= max {
        Ok(value)
    } else {
        Err(format!(
            "`{field}` must be a number between 0 (exclusive) and {max} (got {value}); e.g. {example}"
        ))
    }
}

/// A goal's name length (its characters are checked by `goal::parse`).
pub fn name(name: &str) -> Result<(), String> {
    if NAME_BYTES.contains(&name.len()) {
        Ok(())
    } else {
        Err(format!(
            "`name` must be between {} and {} bytes long (got {}); choose a short word, e.g. name = \"mla-splitkv\"",
            NAME_BYTES.start(),
            NAME_BYTES.end(),
            name.len()
        ))
    }
}

/// The number of (distinct) seeds a goal names.
pub fn seeds(count: usize) -> Result<(), String> {
    if SEEDS.contains(&count) {
        Ok(())
    } else {
        Err(format!(
            "`seed` must name between {} and {} seeds (got {count})",
            SEEDS.start(),
            SEEDS.end()
        ))
    }
}

/// The size of a goal as stored (spec and seed texts, as JSON).
pub fn goal_stored(bytes: usize) -> Result<(), String> {
    if bytes <= GOAL_STORED_BYTES {
        Ok(())
    } else {
        Err(format!(
            "the goal with its seeds' text is {bytes} bytes as stored; a goal may be at most \
             {GOAL_STORED_BYTES} bytes (2 MiB): name fewer or smaller seeds"
        ))
    }
}

/// A goal file's size, before it is read or parsed.
pub fn goal_file(what: &str, bytes: u64) -> Result<(), String> {
    if bytes <= GOAL_FILE_BYTES {
        Ok(())
    } else {
        Err(format!(
            "goal file {what} is {bytes} bytes; a goal file may be at most {GOAL_FILE_BYTES} bytes \
             (seeds go in files of their own, named by `seed`)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field_and_the_range() {
        let e = int_in("budget.iterations", 1_000_000_000_000_000_000, &ITERATIONS).unwrap_err();
        assert!(
            e.contains("budget.iterations") && e.contains("between 1 and 1000000"),
            "{e}"
        );
        assert_eq!(int_in("stop.plateau", 5, &PLATEAU), Ok(5));
        for bad in [0.0, -1.0, 1e308, f64::NAN, f64::INFINITY] {
            let e = positive_at_most("budget.gpu_hours", bad, GPU_HOURS_MAX, "8").unwrap_err();
            assert!(e.contains("between 0 (exclusive) and 100000"), "{e}");
        }
        assert!(name(&"x".repeat(129))
            .unwrap_err()
            .contains("between 1 and 128 bytes"));
        assert!(name("ok").is_ok());
        let e = int_in("budget.tokens", i64::MAX, &TOKENS).unwrap_err();
        assert!(e.contains("between 1 and 1000000000000"), "{e}");
        assert!(seeds(0).is_err() && seeds(17).unwrap_err().contains("between 1 and 16"));
        assert!(goal_stored(GOAL_STORED_BYTES).is_ok());
        assert!(goal_stored(GOAL_STORED_BYTES + 1)
            .unwrap_err()
            .contains("at most 2097152 bytes"));
        assert!(goal_file("g.toml", GOAL_FILE_BYTES + 1)
            .unwrap_err()
            .contains("at most"));
    }
}
