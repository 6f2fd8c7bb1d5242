//! Timestamps normalised to UTC milliseconds, so that what is read back equals what was written.

use std::fmt;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An instant, written as RFC 3339 UTC with milliseconds (`2026-03-26T08:15:42.000Z`).
///
/// Input may carry any offset and precision; it is normalised to UTC milliseconds on the way in so that
/// a value read back equals the value written (replays must be byte-identical).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

impl Timestamp {
    pub fn from_millis(millis: i64) -> Option<Self> {
        Utc.timestamp_millis_opt(millis).single().map(Timestamp)
    }

    pub fn as_millis(self) -> i64 {
        self.0.timestamp_millis()
    }

    pub fn parse(text: &str) -> Result<Self, chrono::ParseError> {
        let parsed = DateTime::parse_from_rfc3339(text)?.with_timezone(&Utc);
        // Truncating to milliseconds keeps the wire form lossless.
        Ok(Self::from_millis(parsed.timestamp_millis()).unwrap_or(Timestamp(parsed)))
    }

    pub fn as_datetime(self) -> DateTime<Utc> {
        self.0
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(value: DateTime<Utc>) -> Self {
        Self::from_millis(value.timestamp_millis()).unwrap_or(Timestamp(value))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .description(Some("RFC 3339, UTC, milliseconds"))
            .into()
    }
}

impl utoipa::ToSchema for Timestamp {}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Timestamp::parse(&text).map_err(|err| {
            serde::de::Error::custom(format_args!("invalid RFC 3339 timestamp {text:?}: {err}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: &str) {
        let parsed = Timestamp::parse(input).expect("valid timestamp");
        assert_eq!(parsed.to_string(), expected, "input {input}");
    }

    #[test]
    fn normalises_to_utc_milliseconds() {
        check("2026-03-26T08:15:42Z", "2026-03-26T08:15:42.000Z");
        check("2026-03-26T08:15:42.123456Z", "2026-03-26T08:15:42.123Z");
        check("2026-03-26T10:15:42.5+02:00", "2026-03-26T08:15:42.500Z");
    }

    #[test]
    fn rejects_non_rfc3339() {
        assert!(Timestamp::parse("yesterday").is_err());
        assert!(serde_json::from_str::<Timestamp>("\"2026-13-01T00:00:00Z\"").is_err());
    }
}
