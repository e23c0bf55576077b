//! Cron schedules of disruption budgets: five fields (minute, hour, day of month, month, day of
//! week; names like `mon-fri` and `jan`, lists, ranges, steps) or a macro (`@daily`), in UTC, as
//! Karpenter's budgets read them.

use std::fmt;

/// A parsed schedule.
#[derive(Clone, PartialEq, Eq)]
pub struct Schedule {
    text: String,
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// Day of month and day of week both restricted: either may match (cron's rule).
    either_day: bool,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schedule({:?})", self.text)
    }
}

/// Why a schedule cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cron schedule {schedule:?}: {why}")]
pub struct CronError {
    /// The schedule as written.
    pub schedule: String,
    /// What is wrong.
    pub why: String,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Schedule {
    /// Parses five fields or a macro.
    pub fn parse(text: &str) -> Result<Schedule, CronError> {
        let err = |why: String| CronError {
            schedule: text.to_string(),
            why,
        };
        let trimmed = text.trim();
        let expanded = match trimmed {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => return Err(err(format!("unknown macro {other}"))),
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(err(format!(
                "needs five fields (minute hour day-of-month month day-of-week), found {}",
                fields.len()
            )));
        }
        let minutes = field(fields[0], 0, 59, &[], 0).map_err(|w| err(format!("minute: {w}")))?;
        let hours = field(fields[1], 0, 23, &[], 0).map_err(|w| err(format!("hour: {w}")))?;
        let days =
            field(fields[2], 1, 31, &[], 0).map_err(|w| err(format!("day of month: {w}")))?;
        let months = field(fields[3], 1, 12, &MONTHS, 1).map_err(|w| err(format!("month: {w}")))?;
        // Ranges and steps run over 0–6; a 7 written as such is Sunday too.
        let mut weekdays = field(fields[4], 0, 6, &WEEKDAYS, 0)
            .or_else(|_| field(&fields[4].replace('7', "0"), 0, 6, &WEEKDAYS, 0))
            .map_err(|w| err(format!("day of week: {w}")))?;
        weekdays &= 0x7f;
        // A day field is unrestricted only as `*` or `?` without a step (`*/2` restricts).
        let restricted = |f: &str| !matches!(f, "*" | "?");
        Ok(Schedule {
            text: trimmed.to_string(),
            minutes,
            hours: u32::try_from(hours).unwrap_or(u32::MAX),
            days: u32::try_from(days).unwrap_or(u32::MAX),
            months: u16::try_from(months >> 1).unwrap_or(u16::MAX),
            weekdays: u8::try_from(weekdays).unwrap_or(u8::MAX),
            either_day: restricted(fields[2]) && restricted(fields[4]),
        })
    }

    /// The schedule as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when the schedule ticks at the minute holding `unix` (seconds, UTC).
    pub fn ticks_at(&self, unix: i64) -> bool {
        let minute_of_day = unix.rem_euclid(86_400) / 60;
        let (minute, hour) = (minute_of_day % 60, minute_of_day / 60);
        self.minutes & (1 << minute) != 0
            && self.hours & (1 << hour) != 0
            && self.day_matches(unix.div_euclid(86_400))
    }

    /// True when the schedule's month, day-of-month and day-of-week fields allow the day
    /// `days_since_epoch`.
    fn day_matches(&self, days_since_epoch: i64) -> bool {
        let (_, month, day) = civil(days_since_epoch);
        // 1970-01-01 was a Thursday (4).
        let weekday = (days_since_epoch + 4).rem_euclid(7);
        let day_ok = self.days & (1 << day) != 0;
        let weekday_ok = self.weekdays & (1 << weekday) != 0;
        let days_ok = if self.either_day {
            day_ok || weekday_ok
        } else {
            day_ok && weekday_ok
        };
        self.months & (1 << (month - 1)) != 0 && days_ok
    }

    /// The latest tick at or before `unix` (seconds, UTC), looking back at most `days` days:
    /// day by day, and within a day the latest hour and minute the bit sets allow, so a
    /// year's look-back costs a few hundred steps, not half a million minutes.
    pub fn last_tick(&self, unix: i64, days: i64) -> Option<i64> {
        let floor = unix - unix.rem_euclid(60);
        let today = floor.div_euclid(86_400);
        let minute_of_day = floor.rem_euclid(86_400) / 60;
        for back in 0..=days.max(0) {
            let day = today - back;
            if !self.day_matches(day) {
                continue;
            }
            let (last_hour, last_minute) = if back == 0 {
                (minute_of_day / 60, minute_of_day % 60)
            } else {
                (23, 59)
            };
            for hour in (0..=last_hour).rev() {
                if self.hours & (1 << hour) == 0 {
                    continue;
                }
                let up_to = if hour == last_hour { last_minute } else { 59 };
                let allowed = self.minutes & ((1u64 << (up_to + 1)) - 1);
                if allowed != 0 {
                    let minute = 63 - i64::from(allowed.leading_zeros());
                    return Some(day * 86_400 + hour * 3_600 + minute * 60);
                }
            }
        }
        None
    }

    /// True when a window of `duration` seconds opened by this schedule holds `now`: some tick
    /// fell in `(now - duration, now]`. Looks back at most a year.
    pub fn window_open(&self, now: i64, duration: i64) -> bool {
        let look_back = duration.clamp(0, 366 * 86_400);
        if look_back == 0 {
            return false;
        }
        self.last_tick(now, look_back / 86_400 + 1)
            .is_some_and(|t| t > now - look_back)
    }
}

/// A field as a bit set over `lo..=hi`.
fn field(text: &str, lo: u32, hi: u32, names: &[&str], name_base: u32) -> Result<u64, String> {
    let value = |s: &str| -> Result<u32, String> {
        let lower = s.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            return Ok(u32::try_from(i).unwrap_or(0) + name_base);
        }
        let v: u32 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
        if v < lo || v > hi {
            return Err(format!("{v} is outside {lo}-{hi}"));
        }
        Ok(v)
    };
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| format!("step {s:?} is not a number"))?;
                if step == 0 {
                    return Err("a step of 0".into());
                }
                (r, step)
            }
            None => (part, 1),
        };
        let (from, to) = if range == "*" || range == "?" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            // "5/15": from 5 to the end in steps.
            (v, if part.contains('/') { hi } else { v })
        };
        if from > to {
            return Err(format!("range {from}-{to} runs backwards"));
        }
        let mut v = from;
        while v <= to {
            bits |= 1 << v;
            match v.checked_add(step) {
                Some(next) => v = next,
                None => break,
            }
        }
    }
    Ok(bits)
}

/// (year, month 1–12, day 1–31) of a day counted from 1970-01-01 (the proleptic Gregorian
/// calendar).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-07 (a Monday) 09:00:00 UTC.
    const MON_9AM: i64 = 1_796_634_000;

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(MON_9AM / 86_400), (2026, 12, 7));
        assert_eq!(civil(-1), (1969, 12, 31));
        // 2024-02-29.
        assert_eq!(civil(19_782), (2024, 2, 29));
    }

    /// The minute-by-minute reading of [`Schedule::window_open`], which the day-by-day one
    /// must equal.
    fn window_open_by_scan(s: &Schedule, now: i64, duration: i64) -> bool {
        let look_back = duration.clamp(0, 366 * 86_400);
        let mut t = now - now.rem_euclid(60);
        while t > now - look_back {
            if s.ticks_at(t) {
                return true;
            }
            t -= 60;
        }
        false
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn the_window_is_read_as_the_minute_scan_reads_it(
            which in 0usize..8,
            offset in 0i64..(400 * 86_400),
            duration in 0i64..(40 * 86_400),
        ) {
            let schedules = [
                "0 9 * * mon-fri", "*/15 * * * *", "30 2 29 2 *", "@daily", "0 0 1 * *",
                "5 4 * * sun", "0 22 13 * fri", "59 23 31 12 *",
            ];
            let s = Schedule::parse(schedules[which]).expect("parses");
            let now = MON_9AM - 200 * 86_400 + offset;
            proptest::prop_assert_eq!(
                s.window_open(now, duration),
                window_open_by_scan(&s, now, duration),
                "{} at {} for {}", schedules[which], now, duration
            );
        }
    }

    #[test]
    fn a_closed_window_of_a_year_is_read_without_scanning_minutes() {
        // Feb 29 only: the last tick before 2026-12-07 was 2024-02-29, more than a year back.
        let s = Schedule::parse("30 2 29 2 *").expect("parses");
        assert!(!s.window_open(MON_9AM, 8_000 * 3_600));
        assert_eq!(s.last_tick(MON_9AM, 366), None);
        assert_eq!(
            s.last_tick(MON_9AM, 1_100)
                .map(|t| civil(t.div_euclid(86_400))),
            Some((2024, 2, 29))
        );
    }

    #[test]
    fn weekday_windows() {
        let s = Schedule::parse("0 9 * * mon-fri").expect("parses");
        assert!(s.ticks_at(MON_9AM));
        assert!(!s.ticks_at(MON_9AM + 60));
        assert!(s.window_open(MON_9AM + 3_599, 3_600), "an hour's window");
        assert!(!s.window_open(MON_9AM + 3_600, 3_600), "closed at its end");
        assert!(!s.window_open(MON_9AM - 60, 3_600), "not open before");
        // Saturday 2026-12-05 09:00: no tick.
        assert!(!s.ticks_at(MON_9AM - 2 * 86_400));
    }

    #[test]
    fn macros_steps_lists_and_the_either_day_rule() {
        let daily = Schedule::parse("@daily").expect("parses");
        assert!(daily.ticks_at(MON_9AM - 9 * 3_600));
        let every_15 = Schedule::parse("*/15 * * * *").expect("parses");
        assert!(every_15.ticks_at(MON_9AM + 45 * 60));
        assert!(!every_15.ticks_at(MON_9AM + 50 * 60));
        let list = Schedule::parse("0 9,17 * dec sun,7").expect("parses");
        assert!(!list.ticks_at(MON_9AM), "Monday");
        assert!(list.ticks_at(MON_9AM - 86_400 + 8 * 3_600), "Sunday 17:00");
        // Day 7 of the month or a Friday: Monday the 7th matches by its day of month.
        let either = Schedule::parse("0 9 7 * fri").expect("parses");
        assert!(either.ticks_at(MON_9AM));
    }

    #[test]
    fn steps_stay_in_range_and_starred_steps_restrict() {
        // Odd weekdays are Monday, Wednesday, Friday (not Sunday by way of 7).
        let odd = Schedule::parse("0 9 * * 1/2").expect("parses");
        assert!(odd.ticks_at(MON_9AM));
        assert!(!odd.ticks_at(MON_9AM - 86_400), "Sunday");
        // Every other day of the month, or Mondays: `*/2` restricts, so either may match.
        let either = Schedule::parse("0 9 */2 * mon").expect("parses");
        assert!(either.ticks_at(MON_9AM), "a Monday, the 7th");
        assert!(either.ticks_at(MON_9AM + 2 * 86_400), "the 9th");
        assert!(!either.ticks_at(MON_9AM + 86_400), "Tuesday the 8th");
        // A huge step is one value, not an overflow.
        let one = Schedule::parse("59/4294967295 * * * *").expect("parses");
        assert!(one.ticks_at(MON_9AM + 59 * 60));
        assert!(Schedule::parse("0 9 * * 7")
            .expect("7 is Sunday")
            .ticks_at(MON_9AM - 86_400));
    }

    #[test]
    fn bad_schedules_say_why() {
        for (bad, why) in [
            ("0 9 * *", "five fields"),
            ("61 * * * *", "minute: 61 is outside 0-59"),
            ("0 9 * * funday", "day of week"),
            ("*/0 * * * *", "step of 0"),
            ("@sometimes", "unknown macro"),
            ("0 9-5 * * *", "runs backwards"),
        ] {
            let e = Schedule::parse(bad).expect_err(bad);
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }
}
