//! How human output looks: colors, times, durations, sizes, tables and
//! bars, and the escaping that keeps stored text from acting on the
//! terminal.

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anstream::stream::RawStream;
use anstream::{AutoStream, ColorChoice};
use anstyle::AnsiColor;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use saga_runtime::Status;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Whether human output is colored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Colors {
    /// ANSI colors.
    On,
    /// Plain text.
    Off,
}

impl Colors {
    /// Colors when `stream` (`std::io::stdout()`) is a terminal that shows
    /// them, none when it is a pipe or a file, or when `NO_COLOR` is set
    /// (also `CLICOLOR=0`, `TERM=dumb`); `CLICOLOR_FORCE=1` colors a pipe.
    pub fn when_terminal<S: RawStream>(stream: &S) -> Colors {
        match AutoStream::<S>::choice(stream) {
            ColorChoice::Never => Colors::Off,
            _ => Colors::On,
        }
    }
}

/// `--color`: when human output is colored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ColorWhen {
    /// On a terminal, unless `NO_COLOR` is set.
    #[default]
    Auto,
    /// Always, even into a pipe, and whatever `NO_COLOR` says.
    Always,
    /// Never.
    Never,
}

impl ColorWhen {
    /// The colors to use, given those `auto` stands for.
    pub(crate) fn colors(self, auto: Colors) -> Colors {
        match self {
            ColorWhen::Auto => auto,
            ColorWhen::Always => Colors::On,
            ColorWhen::Never => Colors::Off,
        }
    }
}

/// Paints text when colors are on.
pub(crate) struct Style {
    colors: Colors,
}

#[derive(Clone, Copy)]
pub(crate) enum Paint {
    Red,
    Green,
    Yellow,
    Cyan,
    Dim,
    Bold,
}

impl Style {
    pub(crate) fn new(colors: Colors) -> Self {
        Style { colors }
    }

    pub(crate) fn paint(&self, paint: Paint, text: &str) -> String {
        if self.colors == Colors::Off || text.is_empty() {
            return text.to_owned();
        }
        let style = match paint {
            Paint::Red => AnsiColor::Red.on_default(),
            Paint::Green => AnsiColor::Green.on_default(),
            Paint::Yellow => AnsiColor::Yellow.on_default(),
            Paint::Cyan => AnsiColor::Cyan.on_default(),
            Paint::Dim => anstyle::Style::new().dimmed(),
            Paint::Bold => anstyle::Style::new().bold(),
        };
        format!("{style}{text}{style:#}")
    }

    /// A status in the color of its outcome.
    pub(crate) fn status(&self, status: Status) -> String {
        self.paint_status(status, &status.to_string())
    }

    /// `text` (padded already) in the color of `status`.
    pub(crate) fn paint_status(&self, status: Status, text: &str) -> String {
        let paint = match status {
            Status::Complete => Paint::Green,
            Status::Errored | Status::Blocked => Paint::Red,
            Status::RollingBack | Status::Terminated | Status::Compensated => Paint::Yellow,
            Status::Running | Status::Waiting => Paint::Cyan,
            // Queued, Paused, and any status a later release adds.
            _ => Paint::Bold,
        };
        self.paint(paint, text)
    }
}

/// `2030-01-01 09:00:07 JST`: in the machine's local time zone (`$TZ`, else
/// the system's zone, else UTC), named by its abbreviation.
pub(crate) fn time(at: SystemTime) -> String {
    static LOCAL: OnceLock<TimeZone> = OnceLock::new();
    // An unreadable or malformed `$TZ` is UTC, not the system zone: a
    // person who set it wants something else than the machine's zone.
    time_in(
        at,
        LOCAL.get_or_init(|| TimeZone::try_system().unwrap_or(TimeZone::UTC)),
    )
}

/// [`time`] in `zone`.
fn time_in(at: SystemTime, zone: &TimeZone) -> String {
    let instant = instant(at);
    let info = zone.to_offset_info(instant);
    let local = info.offset().to_datetime(instant);
    format!(
        "{} {}",
        local.strftime("%Y-%m-%d %H:%M:%S"),
        info.abbreviation()
    )
}

/// `2030-01-01T00:00:07.250Z`, for JSON: UTC, to the millisecond (cut,
/// not rounded), as the runtime writes the times of its events.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    instant(at).strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// `at` as an instant; a time before 1970 is 1970, as in the runtime's
/// event texts, and one past the year 9999 is the last instant there is.
fn instant(at: SystemTime) -> Timestamp {
    Timestamp::try_from(at.max(UNIX_EPOCH)).unwrap_or(Timestamp::MAX)
}

/// `850ms`, `1.2s`, `3m 20s`, `2h 5m`, `7d 0h`.
pub(crate) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let secs = d.as_secs();
    match () {
        () if ms < 1000 => format!("{ms}ms"),
        () if secs < 60 => format!("{:.1}s", d.as_secs_f64()),
        () if secs < 3600 => format!("{}m {}s", secs / 60, secs % 60),
        () if secs < 86_400 => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
        () => format!("{}d {}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// The time from `from` to `to`, zero when the clock went back.
pub(crate) fn between(from: SystemTime, to: SystemTime) -> Duration {
    to.duration_since(from).unwrap_or_default()
}

/// `512 B`, `1.5 KiB`, `2.0 MiB`.
pub(crate) fn size(bytes: usize) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{:.1} MiB", b / KIB / KIB)
    }
}

/// Stored text made safe to print on a terminal, on one line. Whatever
/// a workflow stored (an error message, a name, an id, a payload) could
/// otherwise clear the screen, move the cursor or draw a fake row. Every
/// control character (C0, DEL, C1), the bidi overrides and isolates, and
/// the line and paragraph separators are written as `\u{1b}`; newline,
/// carriage return and tab as `\n`, `\r`, `\t`. Everything else passes.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut safe = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => safe.push_str("\\n"),
            '\r' => safe.push_str("\\r"),
            '\t' => safe.push_str("\\t"),
            c if needs_escape(c) => safe.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => safe.push(c),
        }
    }
    Cow::Owned(safe)
}

/// Whether a terminal could act on `c` instead of showing it.
fn needs_escape(c: char) -> bool {
    c.is_control() // C0, DEL and C1
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        || matches!(c, '\u{2028}' | '\u{2029}')
}

/// Stored text, escaped ([`escape`]), in at most `max` columns, with `…`
/// when cut.
pub(crate) fn short(text: &str, max: usize) -> String {
    let line = escape(text);
    if line.width() <= max {
        return line.into_owned();
    }
    let mut cut = String::new();
    let mut used = 0;
    for c in line.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > max {
            break;
        }
        used += w;
        cut.push(c);
    }
    cut.push('…');
    cut
}

/// `text` padded with spaces to `width` columns (a CJK character or an
/// emoji takes two).
pub(crate) fn pad(text: &str, width: usize) -> String {
    format!("{text}{}", " ".repeat(width.saturating_sub(text.width())))
}

/// A bar of `width` cells for the span `start..end` of the whole
/// `from..to`: `···████······`. At least one cell is drawn.
pub(crate) fn bar(
    from: SystemTime,
    to: SystemTime,
    start: SystemTime,
    end: SystemTime,
    width: usize,
) -> String {
    let total = between(from, to).as_secs_f64();
    let cell = |at: SystemTime| -> usize {
        if total <= 0.0 {
            return 0;
        }
        let share = between(from, at).as_secs_f64() / total;
        ((share * width as f64).floor() as usize).min(width.saturating_sub(1))
    };
    let first = cell(start);
    let last = cell(end).max(first);
    (0..width)
        .map(|i| {
            if (first..=last).contains(&i) {
                '█'
            } else {
                '·'
            }
        })
        .collect()
}

/// Rows of cells as columns, each as wide as its widest cell. Widths come
/// from a cell's plain text, since color codes take no room on screen. A
/// row may carry lines printed under it.
pub(crate) struct Table {
    header: Vec<&'static str>,
    rows: Vec<Row>,
}

struct Row {
    cells: Vec<Cell>,
    lines: Vec<String>,
}

/// One cell: its text, and that text as painted. A cell escapes its text
/// ([`escape`]), so stored text goes in as it is.
pub(crate) struct Cell {
    plain: String,
    painted: String,
}

impl Cell {
    pub(crate) fn plain(text: impl AsRef<str>) -> Cell {
        let plain = escape(text.as_ref()).into_owned();
        Cell {
            painted: plain.clone(),
            plain,
        }
    }

    pub(crate) fn painted(text: impl AsRef<str>, style: &Style, paint: Paint) -> Cell {
        let plain = escape(text.as_ref()).into_owned();
        Cell {
            painted: style.paint(paint, &plain),
            plain,
        }
    }

    /// A status in its color.
    pub(crate) fn status(status: Status, style: &Style) -> Cell {
        let plain = status.to_string();
        Cell {
            painted: style.paint_status(status, &plain),
            plain,
        }
    }
}

impl Table {
    pub(crate) fn new(header: Vec<&'static str>) -> Self {
        Table {
            header,
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<Cell>) {
        self.row_with(cells, Vec::new());
    }

    /// A row, then `lines` under it (each already indented).
    pub(crate) fn row_with(&mut self, cells: Vec<Cell>, lines: Vec<String>) {
        self.rows.push(Row { cells, lines });
    }

    pub(crate) fn render(&self, style: &Style) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (i, cell) in row.cells.iter().enumerate() {
                widths[i] = widths[i].max(cell.plain.width());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self
            .header
            .iter()
            .zip(&widths)
            .map(|(h, w)| pad(h, *w))
            .collect();
        out.push_str(&style.paint(Paint::Bold, header.join("  ").trim_end()));
        out.push('\n');
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.cells.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(&cell.painted);
                if i + 1 < row.cells.len() {
                    let used = cell.plain.width();
                    line.push_str(&" ".repeat(widths[i].saturating_sub(used)));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            for line in &row.lines {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_times_durations_and_sizes() {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(1_893_456_007_250);
        assert_eq!(time_in(at, &TimeZone::UTC), "2030-01-01 00:00:07 UTC");
        let tokyo = TimeZone::posix("JST-9").unwrap();
        assert_eq!(time_in(at, &tokyo), "2030-01-01 09:00:07 JST");
        let new_york = TimeZone::posix("EST5EDT,M3.2.0,M11.1.0").unwrap();
        assert_eq!(time_in(at, &new_york), "2029-12-31 19:00:07 EST");
        let summer = at + Duration::from_secs(180 * 86_400);
        assert_eq!(time_in(summer, &new_york), "2030-06-29 20:00:07 EDT");
        assert_eq!(rfc3339(at), "2030-01-01T00:00:07.250Z");
        let almost = at + Duration::from_nanos(999_999);
        assert_eq!(rfc3339(almost), "2030-01-01T00:00:07.250Z");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let before = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(rfc3339(before), "1970-01-01T00:00:00.000Z");
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(1250)), "1.2s");
        assert_eq!(duration(Duration::from_secs(200)), "3m 20s");
        assert_eq!(duration(Duration::from_secs(7 * 86_400)), "7d 0h");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(short("abcdef", 4), "abc…");
    }

    #[test]
    fn a_bar_marks_where_the_time_went() {
        let t0 = std::time::UNIX_EPOCH;
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(bar(t0, at(10), at(0), at(1), 10), "██········");
        assert_eq!(bar(t0, at(10), at(5), at(10), 10), "·····█████");
        assert_eq!(bar(t0, t0, t0, t0, 4), "█···");
    }

    #[test]
    fn colors_only_when_on() {
        assert_eq!(Style::new(Colors::Off).paint(Paint::Red, "x"), "x");
        assert_eq!(
            Style::new(Colors::On).paint(Paint::Red, "x"),
            "\x1b[31mx\x1b[0m"
        );
        assert_eq!(
            Style::new(Colors::On).paint(Paint::Bold, "x"),
            "\x1b[1mx\x1b[0m"
        );
        assert_eq!(Style::new(Colors::On).paint(Paint::Red, ""), "");
    }

    #[test]
    fn stored_text_is_escaped() {
        assert_eq!(escape("credit-bank-b: declined"), "credit-bank-b: declined");
        assert_eq!(
            escape("a\x1b[2J\nb\r\tc\u{7f}\u{9b}\u{202a}\u{202e}\u{2066}\u{2069}\u{2028}d"),
            r"a\u{1b}[2J\nb\r\tc\u{7f}\u{9b}\u{202a}\u{202e}\u{2066}\u{2069}\u{2028}d"
        );
        // Escaping what was escaped changes nothing.
        let once = escape("x\x1b[H\n").into_owned();
        assert_eq!(escape(&once), once);
        // A cut never leaves a raw control character behind.
        assert_eq!(short("ab\ncd", 4), r"ab\…");
        assert_eq!(Cell::plain("a\x1bb").plain, r"a\u{1b}b");
    }

    #[test]
    fn wide_characters_line_up() {
        let mut table = Table::new(vec!["NAME", "N"]);
        table.row(vec![Cell::plain("注文"), Cell::plain("1")]);
        table.row(vec![Cell::plain("🚀"), Cell::plain("2")]);
        table.row(vec![Cell::plain("abcd"), Cell::plain("3")]);
        let text = table.render(&Style::new(Colors::Off));
        for line in text.lines() {
            let last = line.rfind(' ').unwrap() + 1;
            assert_eq!(line[..last].width(), 6, "{text}");
        }
        assert_eq!(pad("注", 4), "注  ");
        assert_eq!(short("注文注文", 5), "注文…");
        assert_eq!(short("注文", 4), "注文");
    }
}
