//! Cursor pagination, shared by every listing: rows newest first by id, the
//! cursor being the last id of the previous page.

use super::error::ApiError;

/// The longest cursor: ids stay far below 10^18.
const MAX_CURSOR_DIGITS: usize = 18;

/// One page asked for: rows below `before` (the cursor), at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// Only rows with a smaller id.
    pub before: Option<i64>,
    /// Page size.
    pub limit: u32,
}

impl PageRequest {
    /// Reads the `cursor` and `limit` query parameters (`limit` from 1 to
    /// `max`, `default` when absent); a bad one is a 400 naming it.
    pub fn parse(
        cursor: Option<&str>,
        limit: Option<u32>,
        default: u32,
        max: u32,
    ) -> Result<Self, ApiError> {
        let limit = limit.unwrap_or(default);
        if !(1..=max).contains(&limit) {
            return Err(ApiError::InvalidArgument(format!(
                "query `limit`: 1 to {max}"
            )));
        }
        let before = cursor
            .map(|cursor| {
                // Exactly what the API hands out: an id in decimal digits.
                let digits = (1..=MAX_CURSOR_DIGITS).contains(&cursor.len())
                    && cursor.bytes().all(|b| b.is_ascii_digit());
                digits
                    .then(|| cursor.parse().ok())
                    .flatten()
                    .ok_or_else(|| {
                        ApiError::InvalidArgument(
                            "query `cursor`: not a cursor from this API".to_owned(),
                        )
                    })
            })
            .transpose()?;
        Ok(Self { before, limit })
    }

    /// How many rows to read: one more than a page tells whether another exists.
    pub fn fetch_limit(self) -> u32 {
        self.limit + 1
    }

    /// Cuts `rows` (read with [`Self::fetch_limit`]) to the page; the cursor
    /// of the next page, when there is one.
    pub fn finish<T>(self, rows: &mut Vec<T>, id: impl Fn(&T) -> i64) -> Option<String> {
        let more = rows.len() > self.limit as usize;
        rows.truncate(self.limit as usize);
        more.then(|| rows.last().map(|row| id(row).to_string()))
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_cursors_are_checked_and_the_next_cursor_is_the_last_id() {
        assert_eq!(
            PageRequest::parse(None, None, 20, 100).unwrap(),
            PageRequest {
                before: None,
                limit: 20
            }
        );
        assert!(PageRequest::parse(None, Some(0), 20, 100).is_err());
        assert!(PageRequest::parse(None, Some(101), 20, 100).is_err());
        for bad in ["x", "-1", "+1", " 1", "1234567890123456789"] {
            assert!(
                PageRequest::parse(Some(bad), None, 20, 100).is_err(),
                "{bad}"
            );
        }
        let page = PageRequest::parse(Some("9"), Some(2), 20, 100).unwrap();
        assert_eq!((page.before, page.fetch_limit()), (Some(9), 3));
        let mut rows = vec![8, 7, 6];
        assert_eq!(page.finish(&mut rows, |r| *r), Some("7".to_owned()));
        assert_eq!(rows, [8, 7]);
        let mut last = vec![5];
        assert_eq!(page.finish(&mut last, |r| *r), None);
    }
}
