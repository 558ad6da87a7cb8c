//! Small statistics shared by the examples and the benchmarks (one copy:
//! include with `#[path = ".../examples/common/stats.rs"] mod stats;`).
#![allow(dead_code)]

/// The median of `values` (sorted in place); the mean of the two middle
/// values for an even count; NaN for none.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_odd_and_even_lengths() {
        assert_eq!(super::median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(super::median(&mut []).is_nan());
    }
}
