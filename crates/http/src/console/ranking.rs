//! The geometry of the console's horizontal bar charts: one row per named value (a member,
//! a key), largest first, its bar's length scaled to the largest, for a template to draw as
//! inline SVG with the name above each bar. Pure: no I/O, no HTML.

use crate::console::chart::{nice_ceiling, WIDTH};
use serde::Serialize;

/// Height of one row, in user units: the name's line, then its bar.
const ROW: f64 = 44.0;
/// Baseline of the name, from the row's top.
const NAME_BASELINE: f64 = 18.0;
/// Top of the bar, from the row's top.
const BAR_TOP: f64 = 24.0;
/// Height of a bar.
const BAR_HEIGHT: f64 = 14.0;
/// Room kept at the right of the longest bar for its value.
const VALUE_ROOM: f64 = 150.0;
/// Gap between a bar's end and its value.
const VALUE_GAP: f64 = 8.0;
/// Least length of a bar whose value is above zero, so that it stays visible.
const MIN_BAR: f64 = 2.0;

/// One row: a name, its value, and where its bar and value are drawn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Row {
    /// The name (a member's, a key's).
    pub(crate) label: String,
    /// The value as shown.
    pub(crate) shown: String,
    /// Baseline of the name.
    pub(crate) name_y: f64,
    /// Top of the bar.
    pub(crate) bar_y: f64,
    /// The bar's length (0 for a value of 0).
    pub(crate) width: f64,
    /// Where the value's text starts (after the bar).
    pub(crate) value_x: f64,
    /// Baseline of the value's text.
    pub(crate) value_y: f64,
}

/// A horizontal bar chart in a `WIDTH` × `height` `viewBox`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Ranking {
    /// `viewBox` width.
    pub(crate) width: f64,
    /// `viewBox` height: one row per value.
    pub(crate) height: f64,
    /// Height of a bar.
    pub(crate) bar_height: f64,
    /// The rows, largest value first (ties keep the order given).
    pub(crate) rows: Vec<Row>,
    /// Whether every value is 0 (or there are none).
    pub(crate) empty: bool,
}

/// `value` rounded to hundredths (shorter SVG attributes; far below a pixel).
fn rounded(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

impl Ranking {
    /// The chart of `data` (name, value), largest first, values shown with `format`.
    /// Negative and non-finite values count as 0.
    pub(crate) fn of(data: &[(String, f64)], format: impl Fn(f64) -> String) -> Self {
        let clean = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
        let mut sorted: Vec<(String, f64)> =
            data.iter().map(|(label, v)| (label.clone(), clean(*v))).collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
        let largest = sorted.first().map_or(0.0, |(_, v)| *v);
        let max = nice_ceiling(largest);
        let room = WIDTH - VALUE_ROOM;
        let rows = sorted
            .iter()
            .enumerate()
            .map(|(i, (label, value))| {
                let top = i as f64 * ROW;
                let width = if max > 0.0 && *value > 0.0 {
                    (value / max * room).clamp(MIN_BAR, room)
                } else {
                    0.0
                };
                Row {
                    label: label.clone(),
                    shown: format(*value),
                    name_y: rounded(top + NAME_BASELINE),
                    bar_y: rounded(top + BAR_TOP),
                    width: rounded(width),
                    value_x: rounded(width + VALUE_GAP),
                    value_y: rounded(top + BAR_TOP + BAR_HEIGHT - 2.0),
                }
            })
            .collect();
        Self {
            width: WIDTH,
            height: (sorted.len().max(1) as f64) * ROW,
            bar_height: BAR_HEIGHT,
            rows,
            empty: largest == 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(v: f64) -> String {
        format!("{v}")
    }

    #[test]
    fn rows_are_largest_first_and_fit_the_box() {
        let data = [("a".to_owned(), 1.0), ("b".to_owned(), 7.0), ("c".to_owned(), f64::NAN)];
        let ranking = Ranking::of(&data, plain);
        let labels: Vec<&str> = ranking.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["b", "a", "c"]);
        assert!(!ranking.empty);
        assert_eq!(ranking.height, 3.0 * ROW);
        // 7 of an axis of 10: 7/10 of the room; 1 of 10: a tenth; NaN: nothing.
        let room = WIDTH - VALUE_ROOM;
        assert!((ranking.rows[0].width - 0.7 * room).abs() < 0.01, "{ranking:?}");
        assert!((ranking.rows[1].width - 0.1 * room).abs() < 0.01, "{ranking:?}");
        assert_eq!((ranking.rows[2].width, ranking.rows[2].shown.as_str()), (0.0, "0"));
        for row in &ranking.rows {
            assert!(row.value_x + VALUE_ROOM - VALUE_GAP <= WIDTH + 0.01, "{row:?}");
            assert!(row.bar_y + BAR_HEIGHT <= ranking.height, "{row:?}");
        }
    }

    #[test]
    fn no_data_is_an_empty_chart_one_row_high() {
        let ranking = Ranking::of(&[], plain);
        assert!(ranking.empty && ranking.rows.is_empty());
        assert_eq!(ranking.height, ROW);
    }
}
