//! sprig dates and durations with Go's reference-time layouts ("2006-01-02 15:04:05") and
//! `time.Duration` printing. Time zones: UTC only. `Local` is UTC in sluice (renderers run in
//! UTC containers), and an unknown zone falls back to UTC exactly as sprig does.

use time::{Duration, OffsetDateTime, UtcOffset};

use crate::funcs::{arg_str, def, FuncDef, FuncResult};
use crate::value::Value;

/// A Go `time.Time` in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoTime(pub OffsetDateTime);

impl GoTime {
    pub fn now() -> GoTime {
        GoTime(OffsetDateTime::now_utc())
    }

    /// Go's `Time.String()`.
    pub fn go_string(&self) -> String {
        format_layout(self.0, "2006-01-02 15:04:05.999999999 -0700 MST")
    }

    /// RFC 3339 with nanoseconds, as `json.Marshal` writes a time.
    pub fn rfc3339(&self) -> String {
        format_layout(self.0, "2006-01-02T15:04:05.999999999Z07:00")
    }
}

pub static FUNCS: &[FuncDef] = &[
    def!("now", [], |_| Ok(Value::Time(GoTime::now()))),
    // sprig formats in the local zone (`date`) or a named one (`dateInZone`); both are UTC
    // here (ADR 0003), whatever offset the time was parsed with.
    def!("date", [Str, Any], |a| Ok(Value::string(format_layout(
        in_utc(&a[1]),
        arg_str(&a, 0)
    )))),
    def!("dateInZone", [Str, Any, Str], |a| Ok(Value::string(
        format_layout(in_utc(&a[1]), arg_str(&a, 0))
    ))),
    def!("date_in_zone", [Str, Any, Str], |a| Ok(Value::string(
        format_layout(in_utc(&a[1]), arg_str(&a, 0))
    ))),
    def!("htmlDate", [Any], |a| Ok(Value::string(format_layout(
        in_utc(&a[0]),
        "2006-01-02"
    )))),
    def!("htmlDateInZone", [Any, Str], |a| Ok(Value::string(
        format_layout(in_utc(&a[0]), "2006-01-02")
    ))),
    def!("dateModify", [Str, Any], |a| Ok(
        date_modify(&a).unwrap_or_else(|_| a[1].clone())
    )),
    def!("date_modify", [Str, Any], |a| Ok(
        date_modify(&a).unwrap_or_else(|_| a[1].clone())
    )),
    def!("mustDateModify", [Str, Any], |a| date_modify(&a)),
    def!("must_date_modify", [Str, Any], |a| date_modify(&a)),
    def!("ago", [Any], |a| {
        let elapsed = GoTime::now().0 - to_time(&a[0]).0;
        let secs = (elapsed.as_seconds_f64()).round() as i128;
        Ok(Value::string(duration_string(secs * 1_000_000_000)))
    }),
    def!("toDate", [Str, Str], |a| Ok(Value::Time(
        parse_layout(arg_str(&a, 1), arg_str(&a, 0)).unwrap_or(GoTime(zero_time()))
    ))),
    def!("mustToDate", [Str, Str], |a| parse_layout(
        arg_str(&a, 1),
        arg_str(&a, 0)
    )
    .map(Value::Time)),
    def!("unixEpoch", [Any], |a| Ok(Value::string(
        to_time(&a[0]).0.unix_timestamp().to_string()
    ))),
    def!("duration", [Any], |a| {
        let secs: i128 = match &a[0] {
            Value::Int(i) => *i as i128,
            Value::String(s) => s.parse::<i64>().unwrap_or(0) as i128,
            _ => 0,
        };
        Ok(Value::string(duration_string(secs * 1_000_000_000)))
    }),
    def!("durationRound", [Any], |a| {
        let ns: i128 = match &a[0] {
            Value::String(s) => parse_duration(s).unwrap_or(0),
            Value::Int(i) => *i as i128,
            Value::Time(t) => (GoTime::now().0 - t.0).whole_nanoseconds(),
            _ => 0,
        };
        Ok(Value::string(duration_round(ns)))
    }),
];

fn zero_time() -> OffsetDateTime {
    // Go's zero time: January 1, year 1, 00:00:00 UTC.
    OffsetDateTime::UNIX_EPOCH - Duration::seconds(62_135_596_800)
}

/// sprig's date argument: a time, or unix seconds (int, int64); anything else is now.
fn to_time(v: &Value) -> GoTime {
    match v {
        Value::Time(t) => *t,
        Value::Int(s) | Value::GoInt(s) => {
            GoTime(OffsetDateTime::from_unix_timestamp(*s).unwrap_or(OffsetDateTime::UNIX_EPOCH))
        }
        _ => GoTime::now(),
    }
}

/// A date argument in UTC, the zone templates format in.
fn in_utc(v: &Value) -> OffsetDateTime {
    to_time(v).0.to_offset(UtcOffset::UTC)
}

fn date_modify(a: &[Value]) -> FuncResult {
    let ns = parse_duration(arg_str(a, 0))?;
    let t = to_time(&a[1]);
    Ok(Value::Time(GoTime(t.0 + Duration::nanoseconds(ns as i64))))
}

/// Methods of `time.Time` that templates call.
pub fn method(t: &GoTime, name: &str, args: &[Value]) -> Result<Value, String> {
    let d = t.0;
    Ok(match (name, args) {
        ("Unix", []) => Value::Int(d.unix_timestamp()),
        ("UnixNano", []) => Value::Int(d.unix_timestamp_nanos() as i64),
        ("Year", []) => Value::GoInt(d.year() as i64),
        // `time.Month` and `time.Weekday` print as their English names.
        ("Month", []) => Value::str(MONTHS[usize::from(u8::from(d.month())) - 1]),
        ("Weekday", []) => Value::str(DAYS[usize::from(d.weekday().number_days_from_sunday())]),
        ("YearDay", []) => Value::GoInt(i64::from(d.ordinal())),
        ("Nanosecond", []) => Value::GoInt(i64::from(d.nanosecond())),
        ("Day", []) => Value::GoInt(d.day() as i64),
        ("Hour", []) => Value::GoInt(d.hour() as i64),
        ("Minute", []) => Value::GoInt(d.minute() as i64),
        ("Second", []) => Value::GoInt(d.second() as i64),
        // The local zone is UTC here (ADR 0003).
        ("UTC" | "Local", []) => Value::Time(GoTime(d.to_offset(UtcOffset::UTC))),
        ("String", []) => Value::string(t.go_string()),
        ("Format", [Value::String(layout)]) => Value::string(format_layout(d, layout)),
        _ => return Err(format!("can't evaluate field {name} in type time.Time")),
    })
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// The layout elements of Go's reference time, longest match first.
const CHUNKS: &[&str] = &[
    "January",
    "Jan",
    "Monday",
    "Mon",
    "MST",
    "2006",
    "002",
    "01",
    "02",
    "03",
    "04",
    "05",
    "06",
    "__2",
    "_2",
    "15",
    "1",
    "2",
    "3",
    "4",
    "5",
    "PM",
    "pm",
    "-07:00:00",
    "-070000",
    "-07:00",
    "-0700",
    "-07",
    "Z07:00:00",
    "Z070000",
    "Z07:00",
    "Z0700",
    "Z07",
];

/// Formats `t` with a Go layout string.
pub fn format_layout(t: OffsetDateTime, layout: &str) -> String {
    let mut out = String::new();
    let mut rest = layout;
    while !rest.is_empty() {
        if let Some(frac) = fraction_chunk(rest, &out) {
            let (width, trim) = frac;
            let digits = format!("{:09}", t.nanosecond());
            let mut part = digits[..width.min(9)].to_string();
            if trim {
                part = part.trim_end_matches('0').to_string();
            }
            if !part.is_empty() {
                out.push(rest.as_bytes()[0] as char);
                out.push_str(&part);
            }
            rest = &rest[1 + width..];
            continue;
        }
        let Some(chunk) = CHUNKS.iter().find(|c| rest.starts_with(**c)) else {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        };
        let hour12 = match t.hour() % 12 {
            0 => 12,
            h => h,
        };
        let offset = t.offset().whole_seconds();
        let zone = |colon: bool, secs: bool, z: bool, hours_only: bool| -> String {
            if z && offset == 0 {
                return "Z".into();
            }
            let sign = if offset < 0 { '-' } else { '+' };
            let o = offset.unsigned_abs();
            let (h, m, s) = (o / 3600, (o / 60) % 60, o % 60);
            let sep = if colon { ":" } else { "" };
            let mut r = format!("{sign}{h:02}");
            if !hours_only {
                r.push_str(&format!("{sep}{m:02}"));
            }
            if secs {
                r.push_str(&format!("{sep}{s:02}"));
            }
            r
        };
        let piece = match *chunk {
            "January" => MONTHS[u8::from(t.month()) as usize - 1].to_string(),
            "Jan" => MONTHS[u8::from(t.month()) as usize - 1][..3].to_string(),
            "Monday" => DAYS[t.weekday().number_days_from_sunday() as usize].to_string(),
            "Mon" => DAYS[t.weekday().number_days_from_sunday() as usize][..3].to_string(),
            "MST" => {
                if offset == 0 {
                    "UTC".to_string()
                } else {
                    zone(false, false, false, false)
                }
            }
            "2006" => format!("{:04}", t.year()),
            "06" => format!("{:02}", t.year().rem_euclid(100)),
            "002" => format!("{:03}", t.ordinal()),
            "__2" => format!("{:>3}", t.ordinal()),
            "01" => format!("{:02}", u8::from(t.month())),
            "1" => u8::from(t.month()).to_string(),
            "02" => format!("{:02}", t.day()),
            "_2" => format!("{:>2}", t.day()),
            "2" => t.day().to_string(),
            "15" => format!("{:02}", t.hour()),
            "03" => format!("{hour12:02}"),
            "3" => hour12.to_string(),
            "04" => format!("{:02}", t.minute()),
            "4" => t.minute().to_string(),
            "05" => format!("{:02}", t.second()),
            "5" => t.second().to_string(),
            "PM" => if t.hour() >= 12 { "PM" } else { "AM" }.to_string(),
            "pm" => if t.hour() >= 12 { "pm" } else { "am" }.to_string(),
            "-07:00:00" => zone(true, true, false, false),
            "-070000" => zone(false, true, false, false),
            "-07:00" => zone(true, false, false, false),
            "-0700" => zone(false, false, false, false),
            "-07" => zone(false, false, false, true),
            "Z07:00:00" => zone(true, true, true, false),
            "Z070000" => zone(false, true, true, false),
            "Z07:00" => zone(true, false, true, false),
            "Z0700" => zone(false, false, true, false),
            _ => zone(false, false, true, true),
        };
        out.push_str(&piece);
        rest = &rest[chunk.len()..];
    }
    out
}

/// `.000`/`.999` (or `,`) after seconds: (digit count, trim trailing zeros).
fn fraction_chunk(rest: &str, _out: &str) -> Option<(usize, bool)> {
    let b = rest.as_bytes();
    if b.len() < 2 || !(b[0] == b'.' || b[0] == b',') || !(b[1] == b'0' || b[1] == b'9') {
        return None;
    }
    let d = b[1];
    let n = b[1..].iter().take_while(|c| **c == d).count();
    if b.get(1 + n).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    Some((n, d == b'9'))
}

/// Parses `value` with a Go layout (numeric fields, month names, zones `Z`/offsets/`UTC`).
pub fn parse_layout(value: &str, layout: &str) -> Result<GoTime, String> {
    let err = || format!("parsing time {value:?} as {layout:?}: cannot parse");
    let (mut year, mut month, mut day, mut hour, mut min, mut sec, mut nanos, mut offset) =
        (1i32, 1u8, 1u8, 0u8, 0u8, 0u8, 0u32, 0i32);
    let mut pm: Option<bool> = None;
    let mut v = value;
    let mut l = layout;
    let num = |v: &mut &str, max_len: usize| -> Option<u32> {
        let n = v
            .bytes()
            .take(max_len)
            .take_while(u8::is_ascii_digit)
            .count();
        if n == 0 {
            return None;
        }
        let parsed = v[..n].parse().ok();
        *v = &v[n..];
        parsed
    };
    while !l.is_empty() {
        if let Some((width, optional)) = fraction_chunk(l, "") {
            let b = v.as_bytes();
            let present = b.len() >= 2 && matches!(b[0], b'.' | b',') && b[1].is_ascii_digit();
            if optional {
                // `.999`: any number of digits, or none at all.
                if present {
                    let n = 1 + v[1..].bytes().take_while(u8::is_ascii_digit).count();
                    nanos = format!("{:0<9}", &v[1..n.min(10)])
                        .parse()
                        .map_err(|_| err())?;
                    v = &v[n..];
                }
            } else {
                // `.000`: exactly that many digits.
                let digits = v
                    .get(1..1 + width)
                    .filter(|d| d.bytes().all(|c| c.is_ascii_digit()));
                match (present || width == 0, digits) {
                    (true, Some(d)) => {
                        nanos = format!("{d:0<9}")
                            .get(..9)
                            .unwrap_or("0")
                            .parse()
                            .map_err(|_| err())?;
                        v = &v[1 + width..];
                    }
                    _ => return Err(err()),
                }
            }
            l = &l[1 + width..];
            continue;
        }
        let Some(chunk) = CHUNKS.iter().find(|c| l.starts_with(**c)) else {
            let c = l.chars().next().unwrap_or_default();
            v = v.strip_prefix(c).ok_or_else(err)?;
            l = &l[c.len_utf8()..];
            continue;
        };
        l = &l[chunk.len()..];
        match *chunk {
            "2006" => year = num(&mut v, 4).ok_or_else(err)? as i32,
            "06" => year = 2000 + num(&mut v, 2).ok_or_else(err)? as i32,
            "01" | "1" => month = num(&mut v, 2).ok_or_else(err)? as u8,
            "02" | "2" | "_2" => {
                v = v.trim_start_matches(' ');
                day = num(&mut v, 2).ok_or_else(err)? as u8
            }
            "15" | "03" | "3" => hour = num(&mut v, 2).ok_or_else(err)? as u8,
            "04" | "4" => min = num(&mut v, 2).ok_or_else(err)? as u8,
            "05" | "5" => {
                sec = num(&mut v, 2).ok_or_else(err)? as u8;
                // Go reads a fractional second after the seconds even when the layout has
                // none (unless the layout's next element is one).
                let b = v.as_bytes();
                if b.len() >= 2
                    && matches!(b[0], b'.' | b',')
                    && b[1].is_ascii_digit()
                    && fraction_chunk(l, "").is_none()
                {
                    let n = 1 + v[1..].bytes().take_while(u8::is_ascii_digit).count();
                    let digits = format!("{:0<9}", &v[1..n.min(10)]);
                    nanos = digits.parse().map_err(|_| err())?;
                    v = &v[n..];
                }
            }
            "January" | "Jan" => {
                let i = MONTHS
                    .iter()
                    .position(|m| v.starts_with(if *chunk == "Jan" { &m[..3] } else { m }))
                    .ok_or_else(err)?;
                v = &v[if *chunk == "Jan" { 3 } else { MONTHS[i].len() }..];
                month = i as u8 + 1;
            }
            "Monday" | "Mon" => {
                let i = DAYS
                    .iter()
                    .position(|d| v.starts_with(if *chunk == "Mon" { &d[..3] } else { d }))
                    .ok_or_else(err)?;
                v = &v[if *chunk == "Mon" { 3 } else { DAYS[i].len() }..];
            }
            "PM" | "pm" => {
                pm = Some(v.get(..2).is_some_and(|s| s.eq_ignore_ascii_case("pm")));
                v = v.get(2..).ok_or_else(err)?;
            }
            "MST" => {
                let n = v.bytes().take_while(u8::is_ascii_uppercase).count();
                v = &v[n..];
            }
            z => {
                if z.starts_with('Z') && v.starts_with('Z') {
                    v = &v[1..];
                } else {
                    let sign = match v.as_bytes().first() {
                        Some(b'+') => 1,
                        Some(b'-') => -1,
                        _ => return Err(err()),
                    };
                    v = &v[1..];
                    let h = num(&mut v, 2).ok_or_else(err)? as i32;
                    v = v.strip_prefix(':').unwrap_or(v);
                    let m = num(&mut v, 2).unwrap_or(0) as i32;
                    offset = sign * (h * 3600 + m * 60);
                }
            }
        }
    }
    if !v.is_empty() {
        return Err(format!("parsing time {value:?}: extra text: {v:?}"));
    }
    if let Some(pm) = pm {
        hour = hour % 12 + if pm { 12 } else { 0 };
    }
    let month = time::Month::try_from(month).map_err(|_| err())?;
    let date = time::Date::from_calendar_date(year, month, day).map_err(|_| err())?;
    let t = date
        .with_hms_nano(hour, min, sec, nanos)
        .map_err(|_| err())?;
    let offset = UtcOffset::from_whole_seconds(offset).map_err(|_| err())?;
    // The time keeps the offset it was written with (Go gives it a fixed zone).
    Ok(GoTime(t.assume_offset(offset)))
}

/// Go's `time.ParseDuration`, in nanoseconds.
pub fn parse_duration(s: &str) -> Result<i128, String> {
    let err = || format!("time: invalid duration {s:?}");
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(err());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let n = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        let number: f64 = rest[..n].parse().map_err(|_| err())?;
        rest = &rest[n..];
        let u = rest
            .bytes()
            .take_while(|b| !b.is_ascii_digit() && *b != b'.')
            .count();
        let unit = match &rest[..u] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(err()),
        };
        rest = &rest[u..];
        total += number * unit;
    }
    let ns = total.round() as i128;
    Ok(if neg { -ns } else { ns })
}

/// Go's `time.Duration.String()`.
pub fn duration_string(ns: i128) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let neg = ns < 0;
    let u = ns.unsigned_abs();
    let frac = |v: u128, prec: u32| -> (String, u128) {
        let div = 10u128.pow(prec);
        let f = v % div;
        let s = if f == 0 {
            String::new()
        } else {
            format!(".{:0width$}", f, width = prec as usize)
                .trim_end_matches('0')
                .to_string()
        };
        (s, v / div)
    };
    let body = if u < 1_000_000_000 {
        let (prec, unit) = match u {
            u if u < 1_000 => (0, "ns"),
            u if u < 1_000_000 => (3, "µs"),
            _ => (6, "ms"),
        };
        let (f, whole) = frac(u, prec);
        format!("{whole}{f}{unit}")
    } else {
        let (f, secs) = frac(u, 9);
        let mut s = format!("{}{f}s", secs % 60);
        let mins = secs / 60;
        if mins > 0 {
            s = format!("{}m{s}", mins % 60);
            let hours = mins / 60;
            if hours > 0 {
                s = format!("{hours}h{s}");
            }
        }
        s
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

/// sprig `durationRound`: the largest whole unit (y, mo, d, h, m, s).
fn duration_round(ns: i128) -> String {
    // sprig 3.2 drops the sign of negative durations.
    let u = ns.unsigned_abs();
    let sign = "";
    let second = 1_000_000_000u128;
    let units = [
        (second * 3600 * 24 * 365, "y"),
        (second * 3600 * 24 * 30, "mo"),
        (second * 3600 * 24, "d"),
        (second * 3600, "h"),
        (second * 60, "m"),
        (second, "s"),
    ];
    for (size, name) in units {
        if u > size {
            return format!("{sign}{}{name}", u / size);
        }
    }
    "0s".into()
}
