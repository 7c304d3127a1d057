//! The `FENCE-S3/1` envelope damaged on purpose, for the corrupt-state scenarios of every
//! client of the format (fence-s3, fence-object-store).

/// `object` (a fenced object's bytes) with one envelope line damaged, as another program would
/// leave it: the mark with a leading zero, or the entry with a kind the format does not have.
/// `Ok(None)` for a part the envelope does not hold.
pub fn damage(
    object: &[u8],
    part: fence_conformance::StatePart,
) -> Result<Option<Vec<u8>>, fence_core::BoxError> {
    use fence_conformance::StatePart;
    let (line, damage): (&str, fn(&str) -> String) = match part {
        StatePart::Mark => ("hwm ", |mark| format!("hwm 0{mark}")),
        StatePart::Entry => ("entry ", |entry| format!("entry maybe {entry}")),
        _ => return Ok(None),
    };
    let object = std::str::from_utf8(object)?;
    let (header, payload) = object.split_once("\n\n").ok_or("no end of header")?;
    let damaged = header
        .lines()
        .map(|l| l.strip_prefix(line).map_or_else(|| l.to_owned(), damage))
        .collect::<Vec<_>>()
        .join("\n");
    if damaged == header {
        return Err(format!("the object has no `{line}` line: {header}").into());
    }
    Ok(Some(format!("{damaged}\n\n{payload}").into_bytes()))
}
