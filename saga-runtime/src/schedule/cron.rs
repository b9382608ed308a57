//! Cron expressions: five fields, `minute hour day-of-month month
//! day-of-week`, parsed here rather than by a crate (the cron crates pull
//! in chrono; the engine's times are `jiff`'s).
//!
//! ```text
//! expression = field{5}, separated by spaces | macro
//! field      = item ("," item)*
//! item       = ("*" | value | value "-" value) ["/" step]
//!            | value "/" step                  (value to the field's end)
//! value      = a number in the field's range, or a name: JAN-DEC for
//!              months, SUN-SAT for days of the week (any case)
//! macro      = @yearly | @annually | @monthly | @weekly | @daily
//!            | @midnight | @hourly
//! ```
//!
//! Ranges: minute 0-59, hour 0-23, day of month 1-31, month 1-12, day of
//! the week 0-7 (0 and 7 are Sunday). As in Vixie cron, when both day
//! fields are restricted (neither starts with `*`), a day matches either
//! of them; otherwise it must match both.
//!
//! Matching is on local wall-clock times (`civil::DateTime`); turning them
//! into instants, with the daylight-saving rules, is `timing`'s business.

use jiff::civil::{Date, DateTime};

/// A parsed cron expression: the allowed values of each field as bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cron {
    minutes: u64,
    hours: u32,
    /// Bit d for day d, 1-31.
    days: u32,
    /// Bit m for month m, 1-12.
    months: u16,
    /// Bit w for weekday w, 0 (Sunday) to 6.
    weekdays: u8,
    /// Whether the day-of-month field starts with `*`.
    any_day: bool,
    /// Whether the day-of-week field starts with `*`.
    any_weekday: bool,
}

/// One field's rules: its name (for errors), its range, its names.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// The value the first name stands for.
    first_named: u32,
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
    first_named: 0,
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
    first_named: 0,
};
const DAY: Field = Field {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
    first_named: 0,
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    first_named: 1,
};
const WEEKDAY: Field = Field {
    name: "day of week",
    min: 0,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    first_named: 0,
};

/// How far ahead a search for the next match looks: a 29 February falls
/// within 8 years (2096, then 2104).
const SEARCH_DAYS: usize = 9 * 366;

impl Cron {
    /// Parses `expression`; the error says which field is wrong and why.
    pub(crate) fn parse(expression: &str) -> Result<Cron, String> {
        let expanded = match expression.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(format!(
                    "unknown macro {other:?}; the macros are @yearly, @monthly, @weekly, @daily and @hourly"
                ));
            }
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(format!("it has {} fields, not 5", fields.len()));
        };
        let weekdays = parse_field(weekday, &WEEKDAY)?;
        let cron = Cron {
            minutes: parse_field(minute, &MINUTE)?,
            hours: parse_field(hour, &HOUR)? as u32,
            days: parse_field(day, &DAY)? as u32,
            months: parse_field(month, &MONTH)? as u16,
            // 7 is Sunday too.
            weekdays: ((weekdays | (weekdays >> 7)) & 0x7f) as u8,
            any_day: day.starts_with('*'),
            any_weekday: weekday.starts_with('*'),
        };
        cron.check_some_day_exists()?;
        Ok(cron)
    }

    /// Refuses an expression that names only days no month has
    /// (`0 0 31 2 *`): it would never fire.
    fn check_some_day_exists(&self) -> Result<(), String> {
        if !self.any_weekday && !self.any_day {
            // Either field may match: a weekday always comes.
            return Ok(());
        }
        // Days in each month, leap years counted (29 February exists).
        const LONGEST: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        let exists = (1..=12).any(|month| {
            self.months & (1 << month) != 0
                && (1..=LONGEST[month as usize - 1]).any(|day| self.days & (1 << day) != 0)
        });
        if exists {
            Ok(())
        } else {
            Err("no month has the days it names, so it never fires".into())
        }
    }

    /// Whether the expression allows date `date`.
    fn allows_date(&self, date: Date) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let day = self.days & (1 << date.day()) != 0;
        let weekday = self.weekdays & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        if self.any_day || self.any_weekday {
            day && weekday
        } else {
            day || weekday
        }
    }

    /// The first wall-clock time at or after `from` (to the minute; its
    /// seconds are dropped) that the expression matches, within the next
    /// nine years.
    pub(crate) fn next_match(&self, from: DateTime) -> Option<DateTime> {
        let mut date = from.date();
        let (mut hour, mut minute) = (from.hour() as u32, from.minute() as u32);
        for _ in 0..SEARCH_DAYS {
            if self.allows_date(date)
                && let Some((h, m)) = self.first_time_from(hour, minute)
            {
                return Some(date.at(h as i8, m as i8, 0, 0));
            }
            date = date.tomorrow().ok()?;
            (hour, minute) = (0, 0);
        }
        None
    }

    /// The first allowed hour and minute at or after `hour:minute` of a day.
    fn first_time_from(&self, hour: u32, minute: u32) -> Option<(u32, u32)> {
        (hour..24)
            .filter(|h| self.hours & (1 << h) != 0)
            .find_map(|h| {
                let from = if h == hour { minute } else { 0 };
                (from..60)
                    .find(|m| self.minutes & (1 << m) != 0)
                    .map(|m| (h, m))
            })
    }
}

/// One field's allowed values as bits: `*/15`, `1-5`, `MON-FRI`, `0,30`.
fn parse_field(text: &str, field: &Field) -> Result<u64, String> {
    let mut bits = 0u64;
    for item in text.split(',') {
        bits |= parse_item(item, field)
            .map_err(|reason| format!("{} field {text:?}: {reason}", field.name))?;
    }
    Ok(bits)
}

/// One item of a list: `*`, `5`, `1-5`, each with an optional `/step`.
fn parse_item(item: &str, field: &Field) -> Result<u64, String> {
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => {
            let step: u32 = step
                .parse()
                .ok()
                .filter(|s| *s > 0)
                .ok_or_else(|| format!("step {step:?} is not a whole number above 0"))?;
            (range, Some(step))
        }
        None => (item, None),
    };
    let (low, high) = if range == "*" {
        (field.min, field.max)
    } else if let Some((low, high)) = range.split_once('-') {
        (value(low, field)?, value(high, field)?)
    } else {
        let low = value(range, field)?;
        // `5/15` runs from 5 to the field's end.
        (low, if step.is_some() { field.max } else { low })
    };
    if low > high {
        return Err(format!("range {range:?} runs backwards"));
    }
    let step = step.unwrap_or(1);
    Ok((low..=high)
        .step_by(step as usize)
        .fold(0, |bits, v| bits | (1 << v)))
}

/// A number in the field's range, or one of its names.
fn value(text: &str, field: &Field) -> Result<u32, String> {
    if let Some(at) = field
        .names
        .iter()
        .position(|name| name.eq_ignore_ascii_case(text))
    {
        return Ok(field.first_named + at as u32);
    }
    match text.parse::<u32>() {
        Ok(v) if (field.min..=field.max).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{v} is out of range {}-{}", field.min, field.max)),
        Err(_) if field.names.is_empty() => Err(format!("{text:?} is not a number")),
        Err(_) => Err(format!(
            "{text:?} is not a number or one of {}",
            field.names.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    fn next(expression: &str, from: DateTime) -> DateTime {
        Cron::parse(expression).unwrap().next_match(from).unwrap()
    }

    #[test]
    fn fields_take_stars_lists_ranges_steps_and_names() {
        let cron = Cron::parse("*/15 9-17 * JAN,jul mon-FRI").unwrap();
        assert_eq!(cron.minutes, 1 | 1 << 15 | 1 << 30 | 1 << 45);
        assert_eq!(cron.hours, (9..=17).fold(0, |b, h| b | 1 << h));
        assert_eq!(cron.months, 1 << 1 | 1 << 7);
        assert_eq!(cron.weekdays, 0b011_1110);
        assert_eq!(
            Cron::parse("5/20 * * * *").unwrap().minutes,
            1 << 5 | 1 << 25 | 1 << 45
        );
        assert_eq!(Cron::parse("0 0 * * 7").unwrap().weekdays, 1);
        assert_eq!(
            Cron::parse("1-10/3 * * * *").unwrap().minutes,
            1 << 1 | 1 << 4 | 1 << 7 | 1 << 10
        );
        assert_eq!(
            Cron::parse("@daily").unwrap(),
            Cron::parse("0 0 * * *").unwrap()
        );
    }

    #[test]
    fn bad_expressions_say_which_field_and_why() {
        for (bad, says) in [
            ("0 2 * *", "4 fields"),
            ("0 2 * * * *", "6 fields"),
            ("60 * * * *", "minute field \"60\": 60 is out of range 0-59"),
            ("* 24 * * *", "hour field"),
            ("* * 0 * *", "day of month field"),
            ("* * * 13 *", "month field"),
            ("* * * FOO *", "one of JAN"),
            ("* * * * 8", "day of week field"),
            ("*/0 * * * *", "step \"0\""),
            ("5-1 * * * *", "runs backwards"),
            ("a * * * *", "\"a\" is not a number"),
            ("0 0 31 2 *", "never fires"),
            ("@often", "unknown macro"),
            ("", "0 fields"),
        ] {
            let error = Cron::parse(bad).unwrap_err();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }

    #[test]
    fn the_next_match_is_at_or_after_the_start() {
        let from = date(2030, 1, 1).at(0, 0, 0, 0);
        assert_eq!(next("0 2 * * *", from), date(2030, 1, 1).at(2, 0, 0, 0));
        assert_eq!(next("0 0 * * *", from), from);
        assert_eq!(
            next("*/15 * * * *", date(2030, 1, 1).at(0, 1, 0, 0)),
            date(2030, 1, 1).at(0, 15, 0, 0)
        );
        assert_eq!(
            next("59 23 * * *", date(2030, 1, 1).at(23, 59, 30, 0)),
            date(2030, 1, 1).at(23, 59, 0, 0)
        );
        // 2030-01-01 is a Tuesday.
        assert_eq!(next("0 9 * * MON", from), date(2030, 1, 7).at(9, 0, 0, 0));
        assert_eq!(next("0 0 29 2 *", from), date(2032, 2, 29).at(0, 0, 0, 0));
        // Both day fields restricted: either one matches.
        assert_eq!(next("0 0 15 * FRI", from), date(2030, 1, 4).at(0, 0, 0, 0));
        // One of them a star: both must match (13 September 2030 is a Friday).
        assert_eq!(
            next("0 0 13 * *", date(2030, 9, 1).at(0, 0, 0, 0)),
            date(2030, 9, 13).at(0, 0, 0, 0)
        );
        assert_eq!(
            next("0 0 */10 * FRI", from),
            date(2030, 1, 11).at(0, 0, 0, 0)
        );
        assert_eq!(next("0 0 * 12 *", from), date(2030, 12, 1).at(0, 0, 0, 0));
    }
}
