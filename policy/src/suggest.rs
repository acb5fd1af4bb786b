//! "Did you mean …?" for unknown settings keys and environment variables.

/// Optimal-string-alignment distance: Levenshtein plus adjacent transpositions, so `modle` is one
/// edit from `model`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The closest candidate within two edits (or differing only in case), if any.
pub fn did_you_mean<'a>(unknown: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let lower = unknown.to_lowercase();
    if let Some(c) = candidates.iter().find(|c| c.to_lowercase() == lower) {
        return Some(c);
    }
    candidates
        .iter()
        .map(|c| (edit_distance(&lower, &c.to_lowercase()), *c))
        .filter(|(d, _)| *d <= 2 && *d < unknown.chars().count())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("model", "model"), 0);
        assert_eq!(edit_distance("modle", "model"), 1);
        assert_eq!(edit_distance("mdl", "model"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn suggestions() {
        let keys = ["model", "hooks", "permissions"];
        assert_eq!(did_you_mean("modle", &keys), Some("model"));
        assert_eq!(did_you_mean("Model", &keys), Some("model"));
        assert_eq!(did_you_mean("permission", &keys), Some("permissions"));
        assert_eq!(did_you_mean("colour", &keys), None);
        assert_eq!(did_you_mean("x", &keys), None);
        assert_eq!(
            did_you_mean("HANZO_MODLE", &["HANZO_MODEL"]),
            Some("HANZO_MODEL")
        );
    }
}
