//! Time zones read from the system's time zone database.
//!
//! The `saga` command prints times in the machine's local time zone. The
//! standard library cannot convert an instant to local time, and the crate
//! takes no time zone dependency, so this module reads the database itself:
//! TZif files (RFC 8536) such as `/etc/localtime` and the files under
//! `/usr/share/zoneinfo`, and POSIX TZ strings (`$TZ` itself, or the footer
//! of a TZif file).
//!
//! It only maps an instant to a UTC offset and an abbreviation. Nothing here
//! panics on bad input: a file or string that cannot be read gives `None`,
//! and [`Zone::local`] falls back to UTC.

use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Where zone names in `$TZ` are looked up.
const ZONEINFO: &str = "/usr/share/zoneinfo";

/// The local zone when `$TZ` is not set.
const LOCALTIME: &str = "/etc/localtime";

/// The largest TZif file read. Real ones are a few kilobytes.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Seconds in a day.
const DAY: i64 = 86_400;

/// Seconds in an hour.
const HOUR: i64 = 3_600;

/// A time zone read from the system's time zone database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Zone {
    /// When the local time type changes (Unix seconds, strictly ascending),
    /// with the index in `types` of the type in force from then on.
    transitions: Vec<(i64, usize)>,
    /// The local time types. The first one applies before the first
    /// transition.
    types: Vec<LocalType>,
    /// The rule for times after the last transition (or for all times when
    /// there are no transitions).
    rule: Option<Rule>,
}

/// A UTC offset and its abbreviation.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LocalType {
    /// Seconds east of UTC.
    offset: i32,
    /// The abbreviation, such as `JST` or `+0530`.
    abbr: String,
}

impl Zone {
    /// The local zone: `$TZ` when set (a zone name such as `Asia/Tokyo`,
    /// looked up under /usr/share/zoneinfo; a leading ':' is allowed; an
    /// absolute path to a TZif file; or a POSIX TZ string such as `JST-9` or
    /// `EST5EDT,M3.2.0,M11.1.0`), else /etc/localtime, else UTC. Never panics
    /// and never fails: anything unreadable or malformed gives UTC.
    pub(crate) fn local() -> Zone {
        let zone = match std::env::var_os("TZ") {
            Some(tz) => tz.to_str().and_then(from_tz_var),
            None => read_tzif(Path::new(LOCALTIME)),
        };
        zone.unwrap_or_else(Zone::utc)
    }

    /// UTC.
    pub(crate) fn utc() -> Zone {
        let utc = LocalType {
            offset: 0,
            abbr: "UTC".to_owned(),
        };
        Zone {
            transitions: Vec::new(),
            types: vec![utc],
            rule: None,
        }
    }

    /// Parses TZif bytes (versions 1, 2, 3, 4). `None` when malformed.
    pub(crate) fn from_tzif(bytes: &[u8]) -> Option<Zone> {
        let mut input = Bytes { rest: bytes };
        let first = Header::read(&mut input)?;
        if first.version == 0 {
            let (transitions, types) = read_block(&mut input, &first, false)?;
            return Some(Zone {
                transitions,
                types,
                rule: None,
            });
        }
        if first.version < b'2' {
            return None;
        }
        // Version 2 and later repeat the data with 64-bit times: skip the
        // 32-bit block and read the second one, then the footer.
        input.take(first.block_len(false)?)?;
        let second = Header::read(&mut input)?;
        let (transitions, types) = read_block(&mut input, &second, true)?;
        let rule = read_footer(&mut input)?;
        Some(Zone {
            transitions,
            types,
            rule,
        })
    }

    /// Parses a POSIX TZ string (the TZif footer format). `None` when
    /// malformed.
    pub(crate) fn from_posix(tz: &str) -> Option<Zone> {
        let rule = Rule::parse(tz)?;
        Some(Zone {
            transitions: Vec::new(),
            types: vec![rule.std.clone()],
            rule: Some(rule),
        })
    }

    /// The UTC offset in seconds (east positive) and the abbreviation (e.g.
    /// "JST", "EDT", "+0530", "UTC") in force at `unix_seconds`.
    pub(crate) fn at(&self, unix_seconds: i64) -> (i32, String) {
        match self.local_type(unix_seconds) {
            Some(local) => (local.offset, local.abbr.clone()),
            None => (0, "UTC".to_owned()),
        }
    }

    /// The local time type in force at `t`. `None` only for a zone with no
    /// types and no rule, which the constructors never make.
    fn local_type(&self, t: i64) -> Option<&LocalType> {
        if let Some(rule) = &self.rule {
            let after_last = self.transitions.last().is_none_or(|&(at, _)| t > at);
            if after_last {
                return Some(rule.at(t));
            }
        }
        let passed = self.transitions.partition_point(|&(at, _)| at <= t);
        match passed.checked_sub(1) {
            Some(last) => self
                .transitions
                .get(last)
                .and_then(|&(_, kind)| self.types.get(kind)),
            None => self.types.first(),
        }
    }
}

// --- Finding the zone --------------------------------------------------------

/// The zone `$TZ` names, or `None` when it names nothing usable.
fn from_tz_var(tz: &str) -> Option<Zone> {
    let tz = tz.strip_prefix(':').unwrap_or(tz);
    if tz.is_empty() {
        return Some(Zone::utc());
    }
    if tz.starts_with('/') {
        return read_tzif(Path::new(tz));
    }
    if is_zone_name(tz)
        && let Some(zone) = read_tzif(&Path::new(ZONEINFO).join(tz))
    {
        return Some(zone);
    }
    Zone::from_posix(tz)
}

/// Whether `name` stays inside the zoneinfo directory: a relative path
/// with no empty, `.` or `..` part.
fn is_zone_name(name: &str) -> bool {
    !name
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
}

/// Reads and parses the TZif file at `path`. Only regular files of at most
/// [`MAX_FILE_BYTES`] are read.
fn read_tzif(path: &Path) -> Option<Zone> {
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let file = File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES.saturating_add(1))
        .read_to_end(&mut bytes)
        .ok()?;
    if u64::try_from(bytes.len()).ok()? > MAX_FILE_BYTES {
        return None;
    }
    Zone::from_tzif(&bytes)
}

// --- TZif --------------------------------------------------------------------

/// Bytes not read yet.
struct Bytes<'a> {
    /// The unread bytes.
    rest: &'a [u8],
}

impl<'a> Bytes<'a> {
    /// The next `n` bytes, or `None` when fewer are left.
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.rest.split_at_checked(n)?;
        self.rest = rest;
        Some(head)
    }

    /// The next `N` bytes as an array.
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    /// The next byte.
    fn u8(&mut self) -> Option<u8> {
        let [byte] = self.array()?;
        Some(byte)
    }

    /// The next big-endian unsigned 32-bit number.
    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_be_bytes)
    }

    /// The next big-endian signed 32-bit number.
    fn i32(&mut self) -> Option<i32> {
        self.array().map(i32::from_be_bytes)
    }

    /// The next time: 64-bit when `wide`, else 32-bit.
    fn time(&mut self, wide: bool) -> Option<i64> {
        if wide {
            self.array().map(i64::from_be_bytes)
        } else {
            self.i32().map(i64::from)
        }
    }
}

/// A TZif header: the version and the counts of the data block after it.
struct Header {
    /// 0 for version 1, else the ASCII digit (`b'2'`, `b'3'`, `b'4'`).
    version: u8,
    /// UT/local indicators.
    isutcnt: usize,
    /// Standard/wall indicators.
    isstdcnt: usize,
    /// Leap-second records.
    leapcnt: usize,
    /// Transition times.
    timecnt: usize,
    /// Local time types.
    typecnt: usize,
    /// Bytes of abbreviations.
    charcnt: usize,
}

impl Header {
    /// Reads and checks a header.
    fn read(input: &mut Bytes<'_>) -> Option<Header> {
        if input.take(4)? != b"TZif" {
            return None;
        }
        let version = input.u8()?;
        input.take(15)?;
        let mut counts = [0_usize; 6];
        for count in &mut counts {
            *count = usize::try_from(input.u32()?).ok()?;
        }
        let [isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt] = counts;
        let indicators_fit = |n| n == 0 || n == typecnt;
        if typecnt == 0 || !indicators_fit(isutcnt) || !indicators_fit(isstdcnt) {
            return None;
        }
        Some(Header {
            version,
            isutcnt,
            isstdcnt,
            leapcnt,
            timecnt,
            typecnt,
            charcnt,
        })
    }

    /// The length of the data block: times are 64-bit when `wide`.
    fn block_len(&self, wide: bool) -> Option<usize> {
        let time = if wide { 8 } else { 4 };
        self.timecnt
            .checked_mul(time + 1)?
            .checked_add(self.typecnt.checked_mul(6)?)?
            .checked_add(self.charcnt)?
            .checked_add(self.leapcnt.checked_mul(time + 4)?)?
            .checked_add(self.isstdcnt)?
            .checked_add(self.isutcnt)
    }
}

/// The transitions and local time types of a TZif data block.
type Block = (Vec<(i64, usize)>, Vec<LocalType>);

/// Reads the data block that `header` describes.
///
/// The whole block is taken from the input first, so every count has been
/// checked against the input's length before anything is allocated.
fn read_block(input: &mut Bytes<'_>, header: &Header, wide: bool) -> Option<Block> {
    let mut block = Bytes {
        rest: input.take(header.block_len(wide)?)?,
    };
    let mut times = Vec::with_capacity(header.timecnt);
    for _ in 0..header.timecnt {
        times.push(block.time(wide)?);
    }
    if !times.iter().zip(times.iter().skip(1)).all(|(a, b)| a < b) {
        return None;
    }
    let mut kinds = Vec::with_capacity(header.timecnt);
    for _ in 0..header.timecnt {
        let kind = usize::from(block.u8()?);
        if kind >= header.typecnt {
            return None;
        }
        kinds.push(kind);
    }
    let mut raw_types = Vec::with_capacity(header.typecnt);
    for _ in 0..header.typecnt {
        let offset = block.i32()?;
        let is_dst = block.u8()?;
        let abbr_index = block.u8()?;
        if offset == i32::MIN || is_dst > 1 {
            return None;
        }
        raw_types.push((offset, abbr_index));
    }
    let chars = block.take(header.charcnt)?;
    let types = raw_types
        .into_iter()
        .map(|(offset, index)| {
            let abbr = abbreviation(chars, index)?;
            Some(LocalType { offset, abbr })
        })
        .collect::<Option<Vec<_>>>()?;
    // The rest of the block (leap seconds, standard/wall and UT/local
    // indicators) does not change the offset in force, so it is skipped.
    Some((times.into_iter().zip(kinds).collect(), types))
}

/// The NUL-terminated abbreviation at `index` in `chars`.
fn abbreviation(chars: &[u8], index: u8) -> Option<String> {
    let tail = chars.get(usize::from(index)..)?;
    let end = tail.iter().position(|&c| c == 0)?;
    let name = tail.get(..end)?;
    Some(String::from_utf8_lossy(name).into_owned())
}

/// Reads the footer of a version 2+ file: a newline, a POSIX TZ string
/// (possibly empty), a newline. `Some(None)` for an empty string.
fn read_footer(input: &mut Bytes<'_>) -> Option<Option<Rule>> {
    if input.u8()? != b'\n' {
        return None;
    }
    let len = input.rest.iter().position(|&c| c == b'\n')?;
    let line = input.take(len)?;
    if line.is_empty() {
        return Some(None);
    }
    Rule::parse(std::str::from_utf8(line).ok()?).map(Some)
}

// --- POSIX TZ strings --------------------------------------------------------

/// A POSIX TZ rule: standard time, and maybe daylight saving time.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    /// Standard time.
    std: LocalType,
    /// Daylight saving time, when the zone has it.
    dst: Option<Daylight>,
}

/// Daylight saving time and when it starts and ends each year.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Daylight {
    /// The offset and abbreviation during daylight saving time.
    local: LocalType,
    /// When it starts, in standard local time.
    start: Change,
    /// When it ends, in daylight local time.
    end: Change,
}

/// A yearly change: a day and a local time of day.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Change {
    /// The day in the year.
    day: RuleDay,
    /// Seconds after the start of the day (may be negative, or more than a
    /// day).
    time: i64,
}

/// A day in the year, in one of the three POSIX forms.
#[derive(Clone, Debug, PartialEq, Eq)]
enum RuleDay {
    /// `Jn`: day 1 to 365, Feb 29 never counted.
    NoLeap(i64),
    /// `n`: day 0 to 365, Feb 29 counted in leap years.
    ZeroBased(i64),
    /// `Mm.w.d`: weekday `d` (0 = Sunday) of week `w` (5 = the last) of
    /// month `m`.
    Weekday {
        /// 1 to 12.
        month: i64,
        /// 1 to 5.
        week: i64,
        /// 0 (Sunday) to 6.
        weekday: i64,
    },
}

impl Rule {
    /// Parses `std offset [dst [offset] [,start[/time],end[/time]]]`.
    fn parse(tz: &str) -> Option<Rule> {
        let mut p = Parser {
            rest: tz.as_bytes(),
        };
        let std_name = p.name()?;
        let std_offset = p.offset()?;
        let std = LocalType {
            offset: std_offset,
            abbr: std_name,
        };
        if p.rest.is_empty() {
            return Some(Rule { std, dst: None });
        }
        let dst_name = p.name()?;
        let dst_offset = match p.rest.first() {
            None | Some(b',') => std_offset.checked_add(3_600)?,
            Some(_) => p.offset()?,
        };
        let (start, end) = if p.rest.is_empty() {
            us_default()
        } else {
            p.must_eat(b',')?;
            let start = p.change()?;
            p.must_eat(b',')?;
            (start, p.change()?)
        };
        if !p.rest.is_empty() {
            return None;
        }
        let local = LocalType {
            offset: dst_offset,
            abbr: dst_name,
        };
        let dst = Daylight { local, start, end };
        Some(Rule {
            std,
            dst: Some(dst),
        })
    }

    /// The local time type in force at `t`.
    fn at(&self, t: i64) -> &LocalType {
        match &self.dst {
            Some(dst) if dst.in_effect(t, self.std.offset) => &dst.local,
            _ => &self.std,
        }
    }
}

/// The rule when a TZ string names daylight saving time but gives no
/// rule: the United States' (second Sunday of March to first Sunday of
/// November, at 02:00).
fn us_default() -> (Change, Change) {
    let change = |month, week| Change {
        day: RuleDay::Weekday {
            month,
            week,
            weekday: 0,
        },
        time: 2 * HOUR,
    };
    (change(3, 2), change(11, 1))
}

impl Daylight {
    /// Whether daylight saving time is in force at `t`, in a zone whose
    /// standard offset is `std_offset`.
    ///
    /// The answer is the kind of the latest change at or before `t`. A
    /// change can fall up to a week outside its own year (times may reach
    /// 167 hours), so the changes of the years around `t` are all looked at.
    /// Of two changes at the same instant, the one of the later year wins
    /// (so a rule for daylight time all year round, `EST5EDT4,0/0,J365/25`,
    /// never leaves it), and within a year the end wins.
    fn in_effect(&self, t: i64, std_offset: i32) -> bool {
        let year = civil_from_days(t.div_euclid(DAY)).0;
        let mut latest: Option<(i64, i64, bool)> = None;
        for y in year.saturating_sub(2)..=year.saturating_add(1) {
            let start = (self.start.instant(y, std_offset), y, false);
            let end = (self.end.instant(y, self.local.offset), y, true);
            for change in [start, end] {
                if change.0 <= t && latest.is_none_or(|l| change > l) {
                    latest = Some(change);
                }
            }
        }
        latest.is_some_and(|(_, _, is_end)| !is_end)
    }
}

impl Change {
    /// The Unix time of this change in `year`, where the local time before
    /// the change is `offset` seconds east of UTC.
    fn instant(&self, year: i64, offset: i32) -> i64 {
        self.day
            .days(year)
            .saturating_mul(DAY)
            .saturating_add(self.time)
            .saturating_sub(i64::from(offset))
    }
}

impl RuleDay {
    /// The day in `year`, as days since 1970-01-01.
    fn days(&self, year: i64) -> i64 {
        let jan_1 = days_from_civil(year, 1, 1);
        match *self {
            RuleDay::NoLeap(n) => {
                let after_feb_29 = is_leap(year) && n >= 60;
                jan_1 + n - 1 + i64::from(after_feb_29)
            }
            RuleDay::ZeroBased(n) => jan_1 + n,
            RuleDay::Weekday {
                month,
                week,
                weekday,
            } => {
                let first = days_from_civil(year, month, 1);
                let mut day = 1 + (weekday - weekday_of(first)).rem_euclid(7) + 7 * (week - 1);
                if day > days_in_month(year, month) {
                    day -= 7;
                }
                first + day - 1
            }
        }
    }
}

/// Reads a POSIX TZ string from left to right.
struct Parser<'a> {
    /// The bytes not read yet.
    rest: &'a [u8],
}

impl<'a> Parser<'a> {
    /// Skips `byte` if it comes next.
    fn eat(&mut self, byte: u8) -> bool {
        match self.rest.split_first() {
            Some((&first, rest)) if first == byte => {
                self.rest = rest;
                true
            }
            _ => false,
        }
    }

    /// Skips `byte`, which must come next.
    fn must_eat(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    /// The longest run of bytes that match `f`.
    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'a [u8] {
        let len = self
            .rest
            .iter()
            .position(|&c| !f(c))
            .unwrap_or(self.rest.len());
        let (head, rest) = self.rest.split_at_checked(len).unwrap_or((self.rest, &[]));
        self.rest = rest;
        head
    }

    /// A zone name: 3 or more letters, or `<...>` around 3 or more
    /// letters, digits, `+` and `-`.
    fn name(&mut self) -> Option<String> {
        let name = if self.eat(b'<') {
            let name = self.take_while(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'-');
            self.must_eat(b'>')?;
            name
        } else {
            self.take_while(|c| c.is_ascii_alphabetic())
        };
        if name.len() < 3 {
            return None;
        }
        Some(name.iter().copied().map(char::from).collect())
    }

    /// A number of 1 to 3 digits, at most `max`.
    fn number(&mut self, max: i64) -> Option<i64> {
        let digits = self.take_while(|c| c.is_ascii_digit());
        if digits.is_empty() || digits.len() > 3 {
            return None;
        }
        let n = digits.iter().fold(0, |n, &d| n * 10 + i64::from(d - b'0'));
        (n <= max).then_some(n)
    }

    /// `[+-]hh[:mm[:ss]]` in seconds, with hours at most `max_hours`.
    fn duration(&mut self, max_hours: i64) -> Option<i64> {
        let sign = if self.eat(b'-') {
            -1
        } else {
            self.eat(b'+');
            1
        };
        let hours = self.number(max_hours)?;
        let mut minutes = 0;
        let mut seconds = 0;
        if self.eat(b':') {
            minutes = self.number(59)?;
            if self.eat(b':') {
                seconds = self.number(59)?;
            }
        }
        Some(sign * (hours * HOUR + minutes * 60 + seconds))
    }

    /// A UTC offset, turned from POSIX's west-positive to east-positive
    /// seconds.
    fn offset(&mut self) -> Option<i32> {
        i32::try_from(-self.duration(24)?).ok()
    }

    /// A change: `date[/time]`, the time 02:00 when absent.
    fn change(&mut self) -> Option<Change> {
        let day = self.day()?;
        // RFC 8536 allows -167 to 167 hours.
        let time = if self.eat(b'/') {
            self.duration(167)?
        } else {
            2 * HOUR
        };
        Some(Change { day, time })
    }

    /// A day: `Jn`, `n` or `Mm.w.d`.
    fn day(&mut self) -> Option<RuleDay> {
        if self.eat(b'J') {
            let n = self.number(365)?;
            return (n >= 1).then_some(RuleDay::NoLeap(n));
        }
        if self.eat(b'M') {
            let month = self.number(12)?;
            self.must_eat(b'.')?;
            let week = self.number(5)?;
            self.must_eat(b'.')?;
            let weekday = self.number(6)?;
            if month == 0 || week == 0 {
                return None;
            }
            return Some(RuleDay::Weekday {
                month,
                week,
                weekday,
            });
        }
        self.number(365).map(RuleDay::ZeroBased)
    }
}

// --- Civil dates -------------------------------------------------------------

/// Whether `year` (proleptic Gregorian) has a Feb 29.
fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// The number of days in `month` (1 to 12) of `year`.
fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date (month 1 to 12, day 1 to 31).
///
/// Howard Hinnant's method: count years from March, so that the leap day
/// ends a year, and split the years into 400-year eras of 146 097 days.
/// Exact for any year whose day count fits in an `i64`; the callers pass
/// years derived from an `i64` of seconds, far inside that range.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date (year, month 1 to 12, day 1 to 31) `days` after 1970-01-01.
/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The weekday (0 = Sunday) `days` after 1970-01-01, a Thursday.
fn weekday_of(days: i64) -> i64 {
    (days + 4).rem_euclid(7)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix seconds of a UTC date and time.
    fn utc(year: i64, month: i64, day: i64, hour: i64, minute: i64, second: i64) -> i64 {
        days_from_civil(year, month, day) * DAY + hour * HOUR + minute * 60 + second
    }

    fn at(zone: &Zone, t: i64) -> (i32, &str) {
        let local = zone.local_type(t).expect("a local type");
        (local.offset, local.abbr.as_str())
    }

    fn posix(tz: &str) -> Zone {
        Zone::from_posix(tz).unwrap_or_else(|| panic!("{tz} should parse"))
    }

    /// Asserts the zone changes to `after` exactly at `t`.
    fn assert_switch(zone: &Zone, t: i64, before: (i32, &str), after: (i32, &str)) {
        assert_eq!(at(zone, t - 1), before, "just before {t}");
        assert_eq!(at(zone, t), after, "at {t}");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(weekday_of(0), 4);
        assert_eq!(weekday_of(days_from_civil(2024, 3, 10)), 0);
        for days in (-800_000..800_000).step_by(7) {
            let (y, m, d) = civil_from_days(days);
            assert!((1..=12).contains(&m) && (1..=days_in_month(y, m)).contains(&d));
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert!(is_leap(2000) && is_leap(2024) && !is_leap(1900) && !is_leap(2023));
        assert!(is_leap(-4) && !is_leap(-100));
    }

    #[test]
    fn fixed_posix_zones() {
        let zone = posix("UTC0");
        for t in [i64::MIN, -1, 0, 1_700_000_000, i64::MAX] {
            assert_eq!(zone.at(t), (0, "UTC".to_owned()));
        }
        assert_eq!(posix("JST-9").at(0), (32_400, "JST".to_owned()));
        assert_eq!(posix("<+0530>-5:30").at(0), (19_800, "+0530".to_owned()));
        assert_eq!(posix("<-03>3").at(0), (-10_800, "-03".to_owned()));
        assert_eq!(posix("XXX+1:02:03").at(0), (-3_723, "XXX".to_owned()));
        assert_eq!(Zone::utc().at(12_345), (0, "UTC".to_owned()));
    }

    #[test]
    fn us_rule() {
        let zone = posix("EST5EDT,M3.2.0,M11.1.0");
        assert_eq!(at(&zone, utc(2024, 1, 15, 12, 0, 0)), (-18_000, "EST"));
        assert_eq!(at(&zone, utc(2024, 7, 15, 12, 0, 0)), (-14_400, "EDT"));
        let start = utc(2024, 3, 10, 7, 0, 0);
        let end = utc(2024, 11, 3, 6, 0, 0);
        assert_eq!((start, end), (1_710_054_000, 1_730_613_600));
        assert_switch(&zone, start, (-18_000, "EST"), (-14_400, "EDT"));
        assert_switch(&zone, end, (-14_400, "EDT"), (-18_000, "EST"));
        // Without a rule, the US rule applies; an explicit DST offset too.
        for tz in ["EST5EDT", "EST5EDT4", "EST+5EDT,M3.2.0/2,M11.1.0/02:00:00"] {
            let zone = posix(tz);
            assert_switch(&zone, start, (-18_000, "EST"), (-14_400, "EDT"));
            assert_switch(&zone, end, (-14_400, "EDT"), (-18_000, "EST"));
        }
    }

    #[test]
    fn southern_rule() {
        let zone = posix("AEST-10AEDT,M10.1.0,M4.1.0/3");
        assert_eq!(at(&zone, utc(2024, 1, 15, 0, 0, 0)), (39_600, "AEDT"));
        assert_eq!(at(&zone, utc(2024, 7, 15, 0, 0, 0)), (36_000, "AEST"));
        // Ends Sunday 2024-04-07 03:00 AEDT, starts Sunday 2024-10-06 02:00 AEST.
        let end = utc(2024, 4, 6, 16, 0, 0);
        let start = utc(2024, 10, 5, 16, 0, 0);
        assert_switch(&zone, end, (39_600, "AEDT"), (36_000, "AEST"));
        assert_switch(&zone, start, (36_000, "AEST"), (39_600, "AEDT"));
        assert_eq!(at(&zone, utc(2024, 12, 31, 23, 0, 0)), (39_600, "AEDT"));
        // Lord Howe: half an hour of daylight saving time.
        let zone = posix("<+1030>-10:30<+11>-11,M10.1.0,M4.1.0");
        assert_eq!(at(&zone, utc(2024, 1, 15, 0, 0, 0)), (39_600, "+11"));
        assert_eq!(at(&zone, utc(2024, 7, 15, 0, 0, 0)), (37_800, "+1030"));
    }

    #[test]
    fn julian_days() {
        // J60 is March 1 in every year, leap or not.
        let zone = posix("EST5EDT,J60,J300");
        assert_switch(
            &zone,
            utc(2024, 3, 1, 7, 0, 0),
            (-18_000, "EST"),
            (-14_400, "EDT"),
        );
        assert_switch(
            &zone,
            utc(2023, 3, 1, 7, 0, 0),
            (-18_000, "EST"),
            (-14_400, "EDT"),
        );
        // J300 is October 27 (day 300 of a 365-day year); ends at 02:00 EDT.
        assert_switch(
            &zone,
            utc(2024, 10, 27, 6, 0, 0),
            (-14_400, "EDT"),
            (-18_000, "EST"),
        );
        // Day 59 counts Feb 29: it is Feb 29 in 2024, March 1 in 2023.
        let zone = posix("EST5EDT,59/0,299/0");
        assert_switch(
            &zone,
            utc(2024, 2, 29, 5, 0, 0),
            (-18_000, "EST"),
            (-14_400, "EDT"),
        );
        assert_switch(
            &zone,
            utc(2023, 3, 1, 5, 0, 0),
            (-18_000, "EST"),
            (-14_400, "EDT"),
        );
        // Day 299 is October 26 in a leap year.
        assert_switch(
            &zone,
            utc(2024, 10, 26, 4, 0, 0),
            (-14_400, "EDT"),
            (-18_000, "EST"),
        );
    }

    #[test]
    fn daylight_all_year() {
        let zone = posix("EST5EDT4,0/0,J365/25");
        for year in [1900, 2023, 2024, 2100] {
            for t in [
                utc(year, 1, 1, 0, 0, 0),
                utc(year, 1, 1, 4, 59, 59),
                utc(year, 1, 1, 5, 0, 0),
                utc(year, 7, 1, 0, 0, 0),
                utc(year, 12, 31, 23, 59, 59),
            ] {
                assert_eq!(at(&zone, t), (-14_400, "EDT"), "{t}");
            }
        }
    }

    #[test]
    fn long_and_negative_times() {
        // Greenland: starts at -01:00 on the last Sunday of March (-02).
        let zone = posix("<-02>2<-01>,M3.5.0/-1,M10.5.0/0");
        assert_switch(
            &zone,
            utc(2024, 3, 31, 1, 0, 0),
            (-7_200, "-02"),
            (-3_600, "-01"),
        );
        assert_switch(
            &zone,
            utc(2024, 10, 27, 1, 0, 0),
            (-3_600, "-01"),
            (-7_200, "-02"),
        );
        // 167 hours after Dec 31 is in the next year.
        let zone = posix("XXX3YYY,M3.5.0/-167,J365/167");
        assert_eq!(at(&zone, utc(2025, 1, 2, 0, 0, 0)), (-7_200, "YYY"));
        assert_eq!(at(&zone, utc(2025, 1, 8, 0, 0, 0)), (-10_800, "XXX"));
        assert!(Zone::from_posix("XXX3YYY,M3.5.0/168,M10.5.0").is_none());
    }

    #[test]
    fn extreme_instants() {
        for tz in [
            "EST5EDT,M3.2.0,M11.1.0",
            "AEST-10AEDT,M10.1.0,M4.1.0/3",
            "EST5EDT4,0/0,J365/25",
            "XXX-24YYY24,J1/-167,365/167",
        ] {
            let zone = posix(tz);
            for t in [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX - 1, i64::MAX] {
                let _ = zone.at(t);
            }
        }
    }

    #[test]
    fn malformed_posix() {
        for tz in [
            "",
            "J",
            "JST",
            "JS-9",
            "JST-",
            "JST-9X",
            "JST-9 ",
            "JST 9",
            "<+05",
            "<+0530",
            "<+0530>",
            "<>5",
            "<ab>5",
            "<a b>5",
            "EST25",
            "EST5:60",
            "EST5:00:60",
            "EST5:",
            "EST1000",
            "EST5ED",
            "EST5EDT,",
            "EST5EDT,M3.2.0",
            "EST5EDT,M3.2.0,",
            "EST5EDT,M3.2.0,M11.1.0,",
            "EST5EDT,M3.2.0,M11.1.0/",
            "EST5EDT,M13.1.0,M11.1.0",
            "EST5EDT,M0.1.0,M11.1.0",
            "EST5EDT,M3.6.0,M11.1.0",
            "EST5EDT,M3.0.0,M11.1.0",
            "EST5EDT,M3.2.7,M11.1.0",
            "EST5EDT,M3.2,M11.1.0",
            "EST5EDT,J0,J365",
            "EST5EDT,J366,J1",
            "EST5EDT,366,1",
            "EST5EDT,M3.2.0/1000,M11.1.0",
            "EST5EDT;M3.2.0,M11.1.0",
            "ÉST5",
        ] {
            assert_eq!(Zone::from_posix(tz), None, "{tz:?}");
        }
    }

    /// A TZif file: `version` 0 writes only the 32-bit block, else both
    /// blocks and the footer. Each block has one leap second and the
    /// standard/wall and UT/local indicators, which readers skip.
    fn tzif(
        version: u8,
        transitions: &[(i64, u8)],
        types: &[(i32, bool, &str)],
        footer: &str,
    ) -> Vec<u8> {
        let mut chars = Vec::new();
        let mut indices = Vec::new();
        for &(_, _, abbr) in types {
            indices.push(u8::try_from(chars.len()).unwrap());
            chars.extend_from_slice(abbr.as_bytes());
            chars.push(0);
        }
        let block = |out: &mut Vec<u8>, wide: bool| {
            out.extend_from_slice(b"TZif");
            out.push(version);
            out.extend_from_slice(&[0; 15]);
            let n = |len: usize| u32::try_from(len).unwrap().to_be_bytes();
            for count in [
                types.len(),
                types.len(),
                1,
                transitions.len(),
                types.len(),
                chars.len(),
            ] {
                out.extend_from_slice(&n(count));
            }
            let time = |out: &mut Vec<u8>, t: i64| {
                if wide {
                    out.extend_from_slice(&t.to_be_bytes());
                } else {
                    out.extend_from_slice(&i32::try_from(t).unwrap().to_be_bytes());
                }
            };
            for &(t, _) in transitions {
                time(out, t);
            }
            out.extend(transitions.iter().map(|&(_, kind)| kind));
            for (&(offset, is_dst, _), &index) in types.iter().zip(&indices) {
                out.extend_from_slice(&offset.to_be_bytes());
                out.push(u8::from(is_dst));
                out.push(index);
            }
            out.extend_from_slice(&chars);
            time(out, 78_796_800);
            out.extend_from_slice(&1_i32.to_be_bytes());
            out.extend(std::iter::repeat_n(0, 2 * types.len()));
        };
        let mut out = Vec::new();
        block(&mut out, false);
        if version != 0 {
            block(&mut out, true);
            out.push(b'\n');
            out.extend_from_slice(footer.as_bytes());
            out.push(b'\n');
        }
        out
    }

    const TYPES: &[(i32, bool, &str)] = &[
        (3_600, false, "AAA"),
        (7_200, true, "BBB"),
        (10_800, false, "CCC"),
    ];
    const TRANSITIONS: &[(i64, u8)] = &[(-1_000, 1), (0, 2), (1_000, 1)];

    fn fixture() -> Vec<u8> {
        tzif(b'2', TRANSITIONS, TYPES, "JST-9")
    }

    #[test]
    fn tzif_transitions_and_footer() {
        for version in [b'2', b'3', b'4'] {
            let zone = Zone::from_tzif(&tzif(version, TRANSITIONS, TYPES, "JST-9")).unwrap();
            assert_eq!(at(&zone, i64::MIN), (3_600, "AAA"));
            assert_eq!(at(&zone, -1_001), (3_600, "AAA"));
            assert_eq!(at(&zone, -1_000), (7_200, "BBB"));
            assert_eq!(at(&zone, -1), (7_200, "BBB"));
            assert_eq!(at(&zone, 0), (10_800, "CCC"));
            assert_eq!(at(&zone, 999), (10_800, "CCC"));
            assert_eq!(at(&zone, 1_000), (7_200, "BBB"));
            assert_eq!(at(&zone, 1_001), (32_400, "JST"));
            assert_eq!(at(&zone, i64::MAX), (32_400, "JST"));
        }
        // Without a footer rule, the last transition's type stays.
        let zone = Zone::from_tzif(&tzif(b'2', TRANSITIONS, TYPES, "")).unwrap();
        assert_eq!(at(&zone, 1_001), (7_200, "BBB"));
        assert_eq!(at(&zone, i64::MAX), (7_200, "BBB"));
    }

    #[test]
    fn tzif_without_transitions() {
        let zone = Zone::from_tzif(&tzif(b'2', &[], TYPES, "EST5EDT,M3.2.0,M11.1.0")).unwrap();
        assert_eq!(at(&zone, utc(2024, 1, 1, 0, 0, 0)), (-18_000, "EST"));
        assert_eq!(at(&zone, utc(2024, 7, 1, 0, 0, 0)), (-14_400, "EDT"));
        let zone = Zone::from_tzif(&tzif(b'2', &[], TYPES, "")).unwrap();
        assert_eq!(at(&zone, 0), (3_600, "AAA"));
    }

    #[test]
    fn tzif_version_1() {
        let zone = Zone::from_tzif(&tzif(0, TRANSITIONS, TYPES, "")).unwrap();
        assert_eq!(at(&zone, -1_001), (3_600, "AAA"));
        assert_eq!(at(&zone, 0), (10_800, "CCC"));
        assert_eq!(at(&zone, i64::MAX), (7_200, "BBB"));
    }

    #[test]
    fn tzif_truncated() {
        let bytes = fixture();
        assert!(Zone::from_tzif(&bytes).is_some());
        for len in 0..bytes.len() {
            assert_eq!(
                Zone::from_tzif(&bytes[..len]),
                None,
                "prefix of {len} bytes"
            );
        }
        let v1 = tzif(0, TRANSITIONS, TYPES, "");
        for len in 0..v1.len() {
            assert_eq!(Zone::from_tzif(&v1[..len]), None, "prefix of {len} bytes");
        }
    }

    #[test]
    fn tzif_garbage_does_not_panic() {
        let bytes = fixture();
        for i in 0..bytes.len() {
            for value in [0, 1, 2, b'\n', 0x7f, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[i] = value;
                if let Some(zone) = Zone::from_tzif(&bad) {
                    for t in [i64::MIN, -1_000, 0, 1_000, i64::MAX] {
                        let _ = zone.at(t);
                    }
                }
            }
        }
        let mut noise = 0x9e37_79b9_u32;
        let garbage: Vec<u8> = (0..4_096)
            .map(|_| {
                noise ^= noise << 13;
                noise ^= noise >> 17;
                noise ^= noise << 5;
                noise.to_be_bytes()[0]
            })
            .collect();
        assert_eq!(Zone::from_tzif(&garbage), None);
        let mut with_magic = b"TZif2".to_vec();
        with_magic.extend_from_slice(&garbage);
        assert_eq!(Zone::from_tzif(&with_magic), None);
    }

    #[test]
    fn tzif_rejects_bad_data() {
        let good = fixture();
        // Offsets in the file: 44-byte header, 3 * 4 time bytes, then indices.
        let v1_indices = 44 + 3 * 4;
        let mut bad = good.clone();
        bad[..4].copy_from_slice(b"TZiF");
        assert_eq!(Zone::from_tzif(&bad), None, "magic");
        let mut bad = good.clone();
        bad[4] = b'1';
        assert_eq!(Zone::from_tzif(&bad), None, "version");
        // A type index past the types, in the 64-bit block.
        let v2_start = good.windows(4).rposition(|w| w == b"TZif").unwrap();
        assert!(v2_start > 0);
        let mut bad = good.clone();
        bad[v2_start + 44 + 3 * 8] = 3;
        assert_eq!(Zone::from_tzif(&bad), None, "type index");
        // An abbreviation index past the characters.
        let mut bad = good.clone();
        bad[v2_start + 44 + 3 * 9 + 5] = 200;
        assert_eq!(Zone::from_tzif(&bad), None, "abbreviation index");
        // The v1 block is checked for length but not read.
        let mut ok = good.clone();
        ok[v1_indices] = 3;
        assert!(Zone::from_tzif(&ok).is_some());
        // Transitions out of order.
        let bytes = tzif(b'2', &[(0, 1), (0, 2)], TYPES, "");
        assert_eq!(Zone::from_tzif(&bytes), None, "order");
        // No types.
        assert_eq!(Zone::from_tzif(&tzif(b'2', &[], &[], "")), None, "no types");
        // A bad footer.
        assert_eq!(
            Zone::from_tzif(&tzif(b'2', TRANSITIONS, TYPES, "JST")),
            None,
            "footer"
        );
        // Huge counts are refused before anything is allocated.
        let mut huge = good.clone();
        for count in 0..6 {
            huge[20 + 4 * count..24 + 4 * count].copy_from_slice(&u32::MAX.to_be_bytes());
        }
        assert_eq!(Zone::from_tzif(&huge), None, "huge counts");
        let mut huge = good;
        huge[32..36].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(Zone::from_tzif(&huge), None, "huge time count");
    }

    /// The zone in the system's database, or `None` (to skip) when absent.
    fn system(name: &str) -> Option<Zone> {
        let bytes = std::fs::read(Path::new(ZONEINFO).join(name)).ok()?;
        Some(Zone::from_tzif(&bytes).unwrap_or_else(|| panic!("{name} should parse")))
    }

    #[test]
    fn system_zones() {
        if let Some(zone) = system("America/New_York") {
            assert_eq!(
                zone.at(utc(2024, 7, 1, 12, 0, 0)),
                (-14_400, "EDT".to_owned())
            );
            assert_eq!(
                zone.at(utc(2030, 1, 15, 12, 0, 0)),
                (-18_000, "EST".to_owned())
            );
            assert_eq!(
                zone.at(utc(2080, 7, 1, 12, 0, 0)),
                (-14_400, "EDT".to_owned())
            );
            assert_switch(&zone, 1_710_054_000, (-18_000, "EST"), (-14_400, "EDT"));
            assert_switch(&zone, 1_730_613_600, (-14_400, "EDT"), (-18_000, "EST"));
        }
        if let Some(zone) = system("Asia/Tokyo") {
            assert_eq!(
                zone.at(utc(2024, 7, 1, 0, 0, 0)),
                (32_400, "JST".to_owned())
            );
            assert_eq!(
                zone.at(utc(2090, 1, 1, 0, 0, 0)),
                (32_400, "JST".to_owned())
            );
        }
        if let Some(zone) = system("Australia/Sydney") {
            assert_eq!(
                zone.at(utc(2031, 1, 15, 0, 0, 0)),
                (39_600, "AEDT".to_owned())
            );
            assert_eq!(
                zone.at(utc(2031, 7, 15, 0, 0, 0)),
                (36_000, "AEST".to_owned())
            );
        }
    }

    #[test]
    fn tz_variable() {
        let tokyo = (32_400, "JST".to_owned());
        assert_eq!(from_tz_var("JST-9").map(|z| z.at(0)), Some(tokyo.clone()));
        assert_eq!(from_tz_var(":JST-9").map(|z| z.at(0)), Some(tokyo.clone()));
        assert_eq!(
            from_tz_var("").map(|z| z.at(0)),
            Some((0, "UTC".to_owned()))
        );
        assert_eq!(from_tz_var("Nowhere/Such"), None);
        assert_eq!(from_tz_var("/nonexistent/zone"), None);
        assert_eq!(from_tz_var("../../etc/passwd"), None);
        assert_eq!(from_tz_var("/"), None);
        let t = utc(2024, 7, 1, 0, 0, 0);
        if system("Asia/Tokyo").is_some() {
            for tz in [
                "Asia/Tokyo",
                ":Asia/Tokyo",
                "/usr/share/zoneinfo/Asia/Tokyo",
            ] {
                assert_eq!(
                    from_tz_var(tz).map(|z| z.at(t)),
                    Some(tokyo.clone()),
                    "{tz}"
                );
            }
        }
        assert!(!is_zone_name("a//b") && !is_zone_name("./a") && is_zone_name("America/New_York"));
        let _ = Zone::local().at(t);
    }
}
