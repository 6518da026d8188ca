//! The spend-cap alarms: once per cap and period, a line when the
//! platform's spend reaches 70 % of the cap an operator set (a ticket) and
//! another at 90 % (a page). The alerts watch the cap the platform enforces
//! (`mapi admin kill-switches set --spend-cap`), not a second figure typed
//! into the deployment; their log-based metrics match these lines exactly.
//!
//! Each line is logged before its announcement is recorded, so a crash
//! between the two repeats an alarm rather than losing it; only one tick
//! runs at a time, so a plain read and write suffice.

use mapi_admission::SpendStanding;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::SpendCapAlarmDoc;

/// The line at 70 % of the spend cap (logged at warning: a ticket).
pub const SPEND_CAP_70_ALARM: &str = "ALARM spend cap 70 %: the platform's spend reached 70 % of its cap";
/// The line at 90 % of the spend cap (logged at error: a page).
pub const SPEND_CAP_90_ALARM: &str = "ALARM spend cap 90 %: the platform's spend reached 90 % of its cap";

/// The shares of the cap that are announced, highest first.
const LEVELS: [u8; 2] = [90, 70];

/// The share of the cap to announce now, if any: the highest level the
/// spend reached that was not announced already for this cap and period.
/// A new period or a changed cap starts afresh.
pub fn due(standing: &SpendStanding, last: Option<&SpendCapAlarmDoc>) -> Option<u8> {
    let level = LEVELS.into_iter().find(|&l| standing.reached(l))?;
    let announced = last
        .filter(|d| d.period_start == standing.period_start && d.cap_micros == standing.cap_micros)
        .map_or(0, |d| d.announced_percent);
    (level > announced).then_some(level)
}

/// Announces the level due, if any; the level announced.
pub async fn watch(state: &AppState) -> Result<Option<u8>, ApiError> {
    let Some(standing) = mapi_admission::spend_standing(state).await? else { return Ok(None) };
    let last = mapi_schema::get::<SpendCapAlarmDoc>(&*state.store, SpendCapAlarmDoc::ID).await?;
    let Some(level) = due(&standing, last.as_ref()) else { return Ok(None) };
    let (cap, spend, period) = (standing.cap_micros, standing.spend_micros, standing.period.as_str());
    state.metrics.spend_cap_alarms.inc();
    if level >= 90 {
        tracing::error!(cap_micros = cap, spend_micros = spend, period, "{SPEND_CAP_90_ALARM}");
    } else {
        tracing::warn!(cap_micros = cap, spend_micros = spend, period, "{SPEND_CAP_70_ALARM}");
    }
    let doc =
        SpendCapAlarmDoc { period_start: standing.period_start, cap_micros: cap, announced_percent: level };
    mapi_schema::put(&*state.store, &doc).await?;
    Ok(Some(level))
}

#[cfg(test)]
mod tests {
    use mapi_domain::Timestamp;
    use mapi_quota::Period;

    use super::*;

    fn standing(spend: i64, start: Timestamp) -> SpendStanding {
        SpendStanding {
            cap_micros: 1_000,
            spend_micros: spend,
            period: Period::Day,
            period_start: start,
            period_end: start + std::time::Duration::from_secs(86_400),
        }
    }

    fn announced(percent: u8, start: Timestamp, cap: i64) -> SpendCapAlarmDoc {
        SpendCapAlarmDoc { period_start: start, cap_micros: cap, announced_percent: percent }
    }

    #[test]
    fn each_level_is_announced_once_per_cap_and_period() {
        let day = Timestamp::from_micros(1_780_000_000_000_000);
        let next = day + std::time::Duration::from_secs(86_400);
        assert_eq!(due(&standing(699, day), None), None, "under 70 %");
        assert_eq!(due(&standing(700, day), None), Some(70), "exactly 70 %");
        assert_eq!(due(&standing(899, day), Some(&announced(70, day, 1_000))), None, "70 % said already");
        assert_eq!(due(&standing(900, day), Some(&announced(70, day, 1_000))), Some(90));
        assert_eq!(due(&standing(950, day), None), Some(90), "a jump past both says the higher once");
        assert_eq!(due(&standing(2_000, day), Some(&announced(90, day, 1_000))), None, "90 % said already");
        assert_eq!(due(&standing(700, next), Some(&announced(90, day, 1_000))), Some(70), "a new period");
        assert_eq!(due(&standing(700, day), Some(&announced(90, day, 500))), Some(70), "a changed cap");
    }

    #[test]
    fn the_levels_hold_at_any_size_of_cap() {
        let day = Timestamp::from_micros(0);
        let big =
            SpendStanding { cap_micros: i64::MAX, spend_micros: i64::MAX / 100 * 91, ..standing(0, day) };
        assert_eq!(due(&big, None), Some(90), "no overflow at the largest cap");
    }
}
