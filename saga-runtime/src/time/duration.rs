//! Durations written as `"30 seconds"`, `"2 minutes"`, `"7 days"`.

use std::time::Duration;

use crate::error::failure::WaitError;

/// A value that names a duration: a [`Duration`], or a string such as
/// `"30 seconds"`, `"2 minutes"`, `"7 days"`, `"500 milliseconds"`.
///
/// The macros check literal strings at compile time; strings built at run
/// time are checked here and a bad one gives [`WaitError::InvalidDuration`].
pub trait IntoDuration {
    /// The duration, or why the value is not one.
    fn into_duration(self) -> Result<Duration, WaitError>;
}

impl IntoDuration for Duration {
    fn into_duration(self) -> Result<Duration, WaitError> {
        Ok(self)
    }
}

impl IntoDuration for &str {
    fn into_duration(self) -> Result<Duration, WaitError> {
        parse_duration(self).map_err(|reason| WaitError::InvalidDuration {
            input: self.to_owned(),
            reason,
        })
    }
}

impl IntoDuration for String {
    fn into_duration(self) -> Result<Duration, WaitError> {
        self.as_str().into_duration()
    }
}

/// Parses `"<count> <unit>"`: units millisecond(s)/ms, second(s)/s,
/// minute(s)/min, hour(s)/h, day(s)/d, week(s)/w; a bare integer is
/// milliseconds.
pub(crate) fn parse_duration(input: &str) -> Result<Duration, String> {
    let text = input.trim();
    let (count, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => (&text[..at], text[at..].trim()),
        None => (text, "ms"),
    };
    if count.is_empty() {
        return Err("expected a number followed by a unit, e.g. \"30 seconds\"".into());
    }
    let count: u64 = count.parse().map_err(|_| format!("{count} is too large"))?;
    let millis_per_unit: u64 = match unit {
        "ms" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "second" | "seconds" => 1_000,
        "min" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        "w" | "week" | "weeks" => 604_800_000,
        other => {
            return Err(format!(
                "unknown unit {other:?}; use milliseconds, seconds, minutes, hours, days or weeks"
            ));
        }
    };
    count
        .checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{input} is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_spec_examples() {
        assert_eq!(parse_duration("30 seconds"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2 minutes"), Ok(Duration::from_secs(120)));
        assert_eq!(
            parse_duration("7 days"),
            Ok(Duration::from_secs(7 * 86_400))
        );
        assert_eq!(parse_duration("1 second"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("250"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("3 fortnights").is_err());
        assert!(parse_duration("seconds").is_err());
        assert!(parse_duration("99999999999999999999 days").is_err());
    }
}
