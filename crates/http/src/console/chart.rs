//! The geometry of the console's bar charts: one bar per labelled value, scaled to a fixed
//! `viewBox`, for a template to draw as inline SVG. Pure: no I/O, no HTML.

use serde::Serialize;

/// Width of the `viewBox`, in user units.
pub(crate) const WIDTH: f64 = 800.0;
/// Height of the `viewBox`, in user units.
pub(crate) const HEIGHT: f64 = 260.0;
/// Top of the plot (above it: the y-axis maximum's label).
const PLOT_TOP: f64 = 34.0;
/// Bottom of the plot, the x axis (below it: the first and last labels).
const PLOT_BOTTOM: f64 = 226.0;
/// Baseline of the y-axis maximum's label.
const Y_LABEL_BASELINE: f64 = 24.0;
/// Baseline of the x-axis labels.
const X_LABEL_BASELINE: f64 = 254.0;
/// Share of a slot its bar fills (the rest is the gap between bars).
const BAR_SHARE: f64 = 0.8;
/// Least height of a bar whose value is above zero, so that it stays visible.
const MIN_BAR_HEIGHT: f64 = 1.0;

/// One bar: its label and value, and where it is drawn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Bar {
    /// The label of its slot (a day).
    pub(crate) label: String,
    /// The value as shown (`format` of [`Chart::of`]).
    pub(crate) shown: String,
    /// Left edge.
    pub(crate) x: f64,
    /// Top edge.
    pub(crate) y: f64,
    /// Width.
    pub(crate) width: f64,
    /// Height; 0 for a value of 0 (an empty slot: nothing to draw).
    pub(crate) height: f64,
}

/// A bar chart laid out in a `WIDTH` × `HEIGHT` `viewBox`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Chart {
    /// `viewBox` width.
    pub(crate) width: f64,
    /// `viewBox` height.
    pub(crate) height: f64,
    /// One per value, in the order given, left to right.
    pub(crate) bars: Vec<Bar>,
    /// The y axis's maximum (a round number at or above the largest value), as shown.
    pub(crate) max_label: String,
    /// The label of the first slot, drawn at the left end of the x axis.
    pub(crate) first_label: Option<String>,
    /// The label of the last slot, drawn at the right end (absent with a single slot).
    pub(crate) last_label: Option<String>,
    /// Top of the plot (the line of the maximum).
    pub(crate) plot_top: f64,
    /// The x axis.
    pub(crate) plot_bottom: f64,
    /// Baseline of the maximum's label.
    pub(crate) y_label_baseline: f64,
    /// Baseline of the x axis's labels.
    pub(crate) x_label_baseline: f64,
    /// Whether every value is 0 (or there are none).
    pub(crate) empty: bool,
}

/// `value` rounded to hundredths (shorter SVG attributes; far below a pixel).
fn rounded(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// The least of 1, 2, 2.5, 5 × 10ⁿ at or above `value` (0 for 0 or less, or not finite).
pub(crate) fn nice_ceiling(value: f64) -> f64 {
    if !value.is_finite() || value <= 0.0 {
        return 0.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    for step in [1.0, 2.0, 2.5, 5.0, 10.0] {
        let candidate = step * magnitude;
        // Tolerate the rounding of `powf` (1000 may come out as 999.9999…).
        if candidate >= value * (1.0 - 1e-12) {
            return candidate;
        }
    }
    10.0 * magnitude
}

impl Chart {
    /// The chart of `data` (label, value), values shown with `format`. Negative and
    /// non-finite values count as 0.
    pub(crate) fn of(data: &[(String, f64)], format: impl Fn(f64) -> String) -> Self {
        let clean = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
        let largest = data.iter().map(|(_, v)| clean(*v)).fold(0.0, f64::max);
        let max = nice_ceiling(largest);
        let plot_height = PLOT_BOTTOM - PLOT_TOP;
        let slot = if data.is_empty() { WIDTH } else { WIDTH / data.len() as f64 };
        let bars = data
            .iter()
            .enumerate()
            .map(|(i, (label, value))| {
                let value = clean(*value);
                let height = if max > 0.0 && value > 0.0 {
                    (value / max * plot_height).clamp(MIN_BAR_HEIGHT, plot_height)
                } else {
                    0.0
                };
                let width = slot * BAR_SHARE;
                Bar {
                    label: label.clone(),
                    shown: format(value),
                    x: rounded(i as f64 * slot + (slot - width) / 2.0),
                    y: rounded(PLOT_BOTTOM - height),
                    width: rounded(width),
                    height: rounded(height),
                }
            })
            .collect();
        Self {
            width: WIDTH,
            height: HEIGHT,
            bars,
            max_label: format(max),
            first_label: data.first().map(|(l, _)| l.clone()),
            last_label: (data.len() > 1).then(|| data.last().map(|(l, _)| l.clone())).flatten(),
            plot_top: PLOT_TOP,
            plot_bottom: PLOT_BOTTOM,
            y_label_baseline: Y_LABEL_BASELINE,
            x_label_baseline: X_LABEL_BASELINE,
            empty: largest == 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn days(values: &[f64]) -> Vec<(String, f64)> {
        values.iter().enumerate().map(|(i, v)| (format!("day {i}"), *v)).collect()
    }

    fn plain(v: f64) -> String {
        format!("{v}")
    }

    #[test]
    fn no_data_is_an_empty_chart_with_a_zero_axis() {
        let chart = Chart::of(&[], plain);
        assert!(chart.bars.is_empty());
        assert!(chart.empty);
        assert_eq!(chart.max_label, "0");
        assert_eq!((chart.first_label, chart.last_label), (None, None));
    }

    #[test]
    fn zero_values_are_empty_slots() {
        let chart = Chart::of(&days(&[0.0, 0.0, 0.0]), plain);
        assert!(chart.empty);
        assert_eq!(chart.bars.len(), 3);
        assert!(chart.bars.iter().all(|b| b.height == 0.0 && b.y == PLOT_BOTTOM), "{chart:?}");
        for bar in &chart.bars {
            assert!(bar.x.is_finite() && bar.width > 0.0, "{bar:?}");
        }
        assert_eq!(chart.max_label, "0");
        assert_eq!(chart.first_label.as_deref(), Some("day 0"));
        assert_eq!(chart.last_label.as_deref(), Some("day 2"));
    }

    #[test]
    fn one_big_value_fills_the_plot_and_small_ones_stay_visible() {
        let chart = Chart::of(&days(&[1.0, 0.0, 1_000_000_000.0, -5.0, f64::NAN]), plain);
        assert!(!chart.empty);
        assert_eq!(chart.max_label, "1000000000");
        let big = &chart.bars[2];
        assert_eq!((big.y, big.height), (PLOT_TOP, PLOT_BOTTOM - PLOT_TOP));
        assert_eq!(chart.bars[0].height, MIN_BAR_HEIGHT);
        assert_eq!(chart.bars[1].height, 0.0);
        assert_eq!((chart.bars[3].height, chart.bars[3].shown.as_str()), (0.0, "0"));
        assert_eq!(chart.bars[4].height, 0.0);
        // Bars are left to right, inside the box, without overlapping.
        for pair in chart.bars.windows(2) {
            assert!(pair[0].x + pair[0].width < pair[1].x, "{pair:?}");
        }
        let last = chart.bars.last().unwrap();
        assert!(last.x + last.width <= WIDTH);
    }

    #[test]
    fn a_year_of_days_fits_the_width() {
        let values: Vec<f64> = (0..366).map(|i| f64::from(i % 7)).collect();
        let chart = Chart::of(&days(&values), plain);
        assert_eq!(chart.bars.len(), 366);
        assert_eq!(chart.max_label, "10");
        assert!(chart.bars[0].x >= 0.0);
        let last = chart.bars.last().unwrap();
        assert!(last.x + last.width <= WIDTH + 0.01, "{last:?}");
        assert!(chart.bars.iter().all(|b| b.width > 1.0 && b.y + b.height <= PLOT_BOTTOM + 0.01));
        assert_eq!(chart.last_label.as_deref(), Some("day 365"));
        // Six of ten: 6/10 of the plot's height.
        let six = &chart.bars[6];
        assert!((six.height - 0.6 * (PLOT_BOTTOM - PLOT_TOP)).abs() < 0.01, "{six:?}");
    }

    #[test]
    fn the_axis_maximum_is_a_round_number_at_or_above_the_largest_value() {
        for (value, ceiling) in [
            (0.0, 0.0),
            (1.0, 1.0),
            (1.2, 2.0),
            (2.2, 2.5),
            (3.0, 5.0),
            (7.0, 10.0),
            (1000.0, 1000.0),
            (12_300.0, 20_000.0),
            (0.03, 0.05),
        ] {
            let got = nice_ceiling(value);
            assert!((got - ceiling).abs() < ceiling * 1e-9 + 1e-12, "{value}: {got}");
        }
    }
}
