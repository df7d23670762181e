//! String formats the API server checks in CRD schemas (`byte`, `date-time`, `date`, `uuid`,
//! `ipv4`, `ipv6`, `cidr`); other formats are not checked, as apiserver strips the ones it does
//! not support.

use base64::Engine;

/// `Some(valid)` for a checked format, `None` for a format that is not checked.
pub fn valid(format: &str, s: &str) -> Option<bool> {
    Some(match format {
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "date-time" | "datetime" => date_time(s),
        "date" => date(s),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => uuid(s),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        _ => return None,
    })
}

fn date(s: &str) -> bool {
    let f = time::macros::format_description!("[year]-[month]-[day]");
    s.len() == 10 && time::Date::parse(s, &f).is_ok()
}

/// RFC 3339 with or without fractional seconds, or a local date-time without zone.
fn date_time(s: &str) -> bool {
    if time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).is_ok() {
        return true;
    }
    let local = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second][optional [.[subsecond]]]"
    );
    time::PrimitiveDateTime::parse(s, &local).is_ok()
}

fn uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::valid;

    #[test]
    fn formats_accept_and_reject_like_the_api_server() {
        let cases = [
            ("byte", "aGVsbG8=", Some(true)),
            ("byte", "not base64!", Some(false)),
            ("date-time", "2026-11-24T09:00:00Z", Some(true)),
            ("date-time", "2026-11-24T09:00:00.123+02:00", Some(true)),
            ("date-time", "yesterday", Some(false)),
            ("date", "2026-02-30", Some(false)),
            ("date", "2026-02-28", Some(true)),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", Some(true)),
            ("uuid", "123e4567", Some(false)),
            ("ipv4", "10.0.0.1", Some(true)),
            ("ipv6", "10.0.0.1", Some(false)),
            ("cidr", "10.0.0.0/8", Some(true)),
            ("cidr", "10.0.0.0/33", Some(false)),
            ("hostname", "anything", None),
        ];
        for (format, s, want) in cases {
            assert_eq!(valid(format, s), want, "{format} {s:?}");
        }
    }
}
