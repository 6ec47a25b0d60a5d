//! The cells and tables every renderer is made of.

use std::fmt::Write as _;

/// Columns aligned on the widest cell, two spaces apart; no trailing spaces.
pub(super) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, c) in cells.enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let _ = write!(l, "{c:<width$}", width = widths[i]);
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for r in rows {
        line(&mut r.iter().map(String::as_str));
    }
    out
}

/// The value, or `-` without one.
pub(super) fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_owned(), ToString::to_string)
}

pub(super) fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

/// `1.250s` under a minute, `2m05s` under an hour, `1h02m05s` above.
pub(super) fn duration_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{}.{:03}s", s, ms % 1000),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60),
    }
}

/// A number with at most 3 decimals, trailing zeros dropped.
pub(super) fn num(v: f64) -> String {
    let t = format!("{v:.3}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    if t == "-0" { "0" } else { t }.to_owned()
}

/// A share as a percentage with one decimal.
pub(super) fn percent(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_aligns_columns_on_the_widest_cell_without_trailing_spaces() {
        let rows = vec![
            vec!["web".to_owned(), "10.0.1.1".to_owned(), String::new()],
            vec!["a-long-name".to_owned(), "-".to_owned(), "x".to_owned()],
        ];
        assert_eq!(
            table(&["SERVICE", "BACKEND", "NOTE"], &rows),
            "SERVICE      BACKEND   NOTE\n\
             web          10.0.1.1\n\
             a-long-name  -         x\n"
        );
        assert_eq!(table(&["A", "B"], &[]), "A  B\n");
    }

    #[test]
    fn durations_and_numbers_are_short() {
        assert_eq!(duration_ms(0), "0.000s");
        assert_eq!(duration_ms(1250), "1.250s");
        assert_eq!(duration_ms(125_000), "2m05s");
        assert_eq!(duration_ms(3_725_000), "1h02m05s");
        assert_eq!(num(500.0), "500");
        assert_eq!(num(0.12345), "0.123");
        assert_eq!(num(-0.0001), "0");
        assert_eq!(percent(0.6), "60.0%");
        assert_eq!((opt(&Some(3)), opt::<u8>(&None)), ("3".to_owned(), "-".to_owned()));
    }
}
