//! Per-object options of fenced objects: the HTTP headers, user metadata, tags and server-side
//! encryption that readers and bucket policies expect on every object.

use std::collections::BTreeMap;
use std::fmt;

use aws_sdk_s3::operation::create_multipart_upload::builders::CreateMultipartUploadFluentBuilder;
use aws_sdk_s3::operation::get_object::GetObjectOutput;
use aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder;
use aws_sdk_s3::types::ServerSideEncryption;
use fence_core::InvalidInput;

/// The most tags S3 keeps on an object.
pub const MAX_TAGS: usize = 10;
/// The most bytes of user metadata (keys and values) S3 keeps on an object.
pub const MAX_METADATA_BYTES: usize = 2048;

/// Server-side encryption requested for an object (SSE-C is not offered: its key would have to
/// travel with every read, including Fence's own).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Encryption {
    /// SSE-S3 (`AES256`): keys managed by S3.
    S3Managed,
    /// SSE-KMS (`aws:kms`), with the bucket's default KMS key or the one named.
    Kms {
        /// The KMS key id or ARN; `None` for the bucket's default key.
        key_id: Option<String>,
    },
    /// Dual-layer SSE-KMS (`aws:kms:dsse`), with the bucket's default KMS key or the one named.
    KmsDsse {
        /// The KMS key id or ARN; `None` for the bucket's default key.
        key_id: Option<String>,
    },
}

impl fmt::Debug for Encryption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Encryption::S3Managed => f.write_str("S3Managed"),
            // A key id is not a secret, but an ARN names an account: show only that one is set.
            Encryption::Kms { key_id } => f
                .debug_struct("Kms")
                .field("key_id", &key_id.as_ref().map(|_| "<set>"))
                .finish(),
            Encryption::KmsDsse { key_id } => f
                .debug_struct("KmsDsse")
                .field("key_id", &key_id.as_ref().map(|_| "<set>"))
                .finish(),
        }
    }
}

/// The options a fenced object is written with: content type, cache control, content
/// disposition and encoding, user metadata (`x-amz-meta-*`), tags and server-side encryption.
///
/// Every PUT replaces an object's options in S3, so each write sends them: the builder's
/// defaults ([`crate::S3FenceBuilder::object_options`]) or the write's own
/// ([`crate::S3Fence::write_with`]). A claim or a re-base that rewrites an object keeps the
/// options the object has; `adopt` keeps a foreign object's options.
///
/// ```
/// use fence_s3::{Encryption, ObjectOptions};
/// let csv = ObjectOptions::new()
///     .content_type("text/csv")
///     .cache_control("no-cache")
///     .metadata("pipeline", "sales-daily")
///     .tag("team", "finance")
///     .encryption(Encryption::S3Managed);
/// csv.validate()?;
/// assert_eq!(csv.content_type_value(), Some("text/csv"));
/// assert!(ObjectOptions::new().metadata("bad key", "v").validate().is_err());
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectOptions {
    content_type: Option<String>,
    cache_control: Option<String>,
    content_disposition: Option<String>,
    content_encoding: Option<String>,
    metadata: BTreeMap<String, String>,
    tags: BTreeMap<String, String>,
    encryption: Option<Encryption>,
}

impl ObjectOptions {
    /// No options: S3's defaults (`binary/octet-stream` on most servers).
    pub fn new() -> Self {
        Self::default()
    }

    /// The `Content-Type` readers see (`text/csv`, `application/x-parquet`, ...).
    pub fn content_type(mut self, value: impl Into<String>) -> Self {
        self.content_type = Some(value.into());
        self
    }

    /// The `Cache-Control` a CDN or browser sees.
    pub fn cache_control(mut self, value: impl Into<String>) -> Self {
        self.cache_control = Some(value.into());
        self
    }

    /// The `Content-Disposition`.
    pub fn content_disposition(mut self, value: impl Into<String>) -> Self {
        self.content_disposition = Some(value.into());
        self
    }

    /// The `Content-Encoding` (for bytes already compressed, e.g. `gzip`).
    pub fn content_encoding(mut self, value: impl Into<String>) -> Self {
        self.content_encoding = Some(value.into());
        self
    }

    /// Adds user metadata `x-amz-meta-<key>: <value>` (S3 keeps keys lowercase).
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata
            .insert(key.into().to_ascii_lowercase(), value.into());
        self
    }

    /// Adds an object tag (lifecycle rules and IAM conditions can match tags).
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.insert(key.into(), value.into());
        self
    }

    /// Server-side encryption.
    pub fn encryption(mut self, encryption: Encryption) -> Self {
        self.encryption = Some(encryption);
        self
    }

    /// The content type set, if any.
    pub fn content_type_value(&self) -> Option<&str> {
        self.content_type.as_deref()
    }

    /// The cache control set, if any.
    pub fn cache_control_value(&self) -> Option<&str> {
        self.cache_control.as_deref()
    }

    /// The content disposition set, if any.
    pub fn content_disposition_value(&self) -> Option<&str> {
        self.content_disposition.as_deref()
    }

    /// The content encoding set, if any.
    pub fn content_encoding_value(&self) -> Option<&str> {
        self.content_encoding.as_deref()
    }

    /// The user metadata, keys lowercase.
    pub fn metadata_map(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The tags.
    pub fn tag_map(&self) -> &BTreeMap<String, String> {
        &self.tags
    }

    /// The server-side encryption requested, if any.
    pub fn encryption_value(&self) -> Option<&Encryption> {
        self.encryption.as_ref()
    }

    /// Checks the options against S3's rules, so that a bad option fails before any request
    /// instead of as a 400 after the token check: header values printable ASCII of at most 1,024
    /// bytes, metadata keys of letters, digits, `-` and `_` with at most
    /// [`MAX_METADATA_BYTES`] in all, at most [`MAX_TAGS`] tags of S3's tag characters (keys
    /// 1 to 128, values up to 256 characters).
    pub fn validate(&self) -> Result<(), InvalidInput> {
        self.problem()
            .map_or(Ok(()), |why| Err(InvalidInput::Configuration(why)))
    }

    /// What makes these options wrong for a fenced object (whose bytes begin with the
    /// envelope), if anything: S3's rules, and no content encoding.
    pub(crate) fn fenced_problem(&self) -> Option<String> {
        self.problem().or_else(|| {
            self.content_encoding.as_ref().map(|encoding| {
                format!(
                    "content encoding `{encoding}` labels the whole object, but a fenced object begins \
                     with the envelope, so readers that decode it would fail: set it on plain objects (put_plain)"
                )
            })
        })
    }

    /// What breaks S3's rules, if anything.
    pub(crate) fn problem(&self) -> Option<String> {
        let invalid = Some;
        let headers = [
            ("content type", &self.content_type),
            ("cache control", &self.cache_control),
            ("content disposition", &self.content_disposition),
            ("content encoding", &self.content_encoding),
        ];
        for (what, value) in headers {
            if let Some(value) = value {
                if value.is_empty() || value.len() > 1024 || !printable_ascii(value) {
                    return invalid(format!(
                        "object {what} `{}` must be 1 to 1024 printable ASCII characters",
                        value.escape_debug()
                    ));
                }
            }
        }
        let mut metadata_bytes = 0;
        for (key, value) in &self.metadata {
            let key_ok = !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !key_ok {
                return invalid(format!(
                    "object metadata key `{}` must be letters, digits, `-` and `_`",
                    key.escape_debug()
                ));
            }
            if !(value.is_empty() || printable_ascii(value)) {
                return invalid(format!(
                    "object metadata `{key}` must be printable ASCII (S3 sends it as a header)"
                ));
            }
            metadata_bytes += key.len() + value.len();
        }
        if metadata_bytes > MAX_METADATA_BYTES {
            return invalid(format!(
                "object metadata is {metadata_bytes} bytes, S3 keeps at most {MAX_METADATA_BYTES}"
            ));
        }
        if self.tags.len() > MAX_TAGS {
            return invalid(format!(
                "{} object tags, S3 keeps at most {MAX_TAGS}",
                self.tags.len()
            ));
        }
        for (key, value) in &self.tags {
            let keys = key.chars().count();
            if !(1..=128).contains(&keys) || value.chars().count() > 256 {
                return invalid(format!(
                    "object tag `{}`: keys are 1 to 128 characters, values at most 256",
                    key.escape_debug()
                ));
            }
            if !key.chars().chain(value.chars()).all(tag_character) {
                return invalid(format!(
                    "object tag `{}` holds a character S3 does not accept in tags",
                    key.escape_debug()
                ));
            }
        }
        if let Some(
            Encryption::Kms { key_id: Some(id) } | Encryption::KmsDsse { key_id: Some(id) },
        ) = &self.encryption
        {
            if id.is_empty() || !printable_ascii(id) {
                return invalid("KMS key id must be printable ASCII".into());
            }
        }
        None
    }

    /// The `x-amz-tagging` header: `key=value` pairs, URL-encoded, joined by `&`.
    fn tagging(&self) -> Option<String> {
        if self.tags.is_empty() {
            return None;
        }
        let pairs: Vec<String> = self
            .tags
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    fence_core::raw::percent_encode(k),
                    fence_core::raw::percent_encode(v)
                )
            })
            .collect();
        Some(pairs.join("&"))
    }

    fn sse(&self) -> (Option<ServerSideEncryption>, Option<String>) {
        match &self.encryption {
            None => (None, None),
            Some(Encryption::S3Managed) => (Some(ServerSideEncryption::Aes256), None),
            Some(Encryption::Kms { key_id }) => {
                (Some(ServerSideEncryption::AwsKms), key_id.clone())
            }
            Some(Encryption::KmsDsse { key_id }) => {
                (Some(ServerSideEncryption::AwsKmsDsse), key_id.clone())
            }
        }
    }

    /// The options an object was read with; its tags come from a separate request
    /// ([`ObjectOptions::with_tags`]).
    pub(crate) fn of_object(output: &GetObjectOutput) -> Self {
        let owned = |v: Option<&str>| v.map(str::to_owned);
        let encryption = match output.server_side_encryption() {
            Some(ServerSideEncryption::Aes256) => Some(Encryption::S3Managed),
            Some(ServerSideEncryption::AwsKms) => Some(Encryption::Kms {
                key_id: owned(output.ssekms_key_id()),
            }),
            Some(ServerSideEncryption::AwsKmsDsse) => Some(Encryption::KmsDsse {
                key_id: owned(output.ssekms_key_id()),
            }),
            _ => None,
        };
        ObjectOptions {
            content_type: owned(output.content_type()),
            cache_control: owned(output.cache_control()),
            content_disposition: owned(output.content_disposition()),
            content_encoding: owned(output.content_encoding()),
            metadata: output
                .metadata()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            tags: BTreeMap::new(),
            encryption,
        }
    }

    pub(crate) fn with_tags(mut self, tags: impl IntoIterator<Item = (String, String)>) -> Self {
        self.tags = tags.into_iter().collect();
        self
    }

    pub(crate) fn apply_to_put(&self, put: PutObjectFluentBuilder) -> PutObjectFluentBuilder {
        let (sse, kms_key) = self.sse();
        put.set_content_type(self.content_type.clone())
            .set_cache_control(self.cache_control.clone())
            .set_content_disposition(self.content_disposition.clone())
            .set_content_encoding(self.content_encoding.clone())
            .set_metadata(self.metadata_header())
            .set_tagging(self.tagging())
            .set_server_side_encryption(sse)
            .set_ssekms_key_id(kms_key)
    }

    pub(crate) fn apply_to_multipart(
        &self,
        create: CreateMultipartUploadFluentBuilder,
    ) -> CreateMultipartUploadFluentBuilder {
        let (sse, kms_key) = self.sse();
        create
            .set_content_type(self.content_type.clone())
            .set_cache_control(self.cache_control.clone())
            .set_content_disposition(self.content_disposition.clone())
            .set_content_encoding(self.content_encoding.clone())
            .set_metadata(self.metadata_header())
            .set_tagging(self.tagging())
            .set_server_side_encryption(sse)
            .set_ssekms_key_id(kms_key)
    }

    fn metadata_header(&self) -> Option<std::collections::HashMap<String, String>> {
        (!self.metadata.is_empty()).then(|| {
            self.metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
    }
}

fn printable_ascii(text: &str) -> bool {
    text.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// S3's tag alphabet: letters, digits, spaces and `+ - = . _ : / @`.
fn tag_character(c: char) -> bool {
    c.is_alphanumeric() || " +-=._:/@".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_url_encoded_pairs() {
        let options = ObjectOptions::new()
            .tag("team", "finance ops")
            .tag("path", "a/b");
        assert_eq!(
            options.tagging().as_deref(),
            Some("path=a%2Fb&team=finance%20ops")
        );
        assert_eq!(ObjectOptions::new().tagging(), None);
    }

    #[test]
    fn options_outside_s3s_rules_are_refused_naming_the_option() {
        let refused = [
            (
                ObjectOptions::new().content_type("text/csv\n"),
                "content type",
            ),
            (ObjectOptions::new().cache_control(""), "cache control"),
            (ObjectOptions::new().metadata("a.b", "v"), "metadata key"),
            (ObjectOptions::new().metadata("k", "é"), "printable ASCII"),
            (ObjectOptions::new().metadata("k", "x".repeat(2048)), "2048"),
            (ObjectOptions::new().tag("", "v"), "1 to 128"),
            (ObjectOptions::new().tag("k", "a;b"), "character"),
            (
                (0..11).fold(ObjectOptions::new(), |o, i| o.tag(format!("t{i}"), "v")),
                "at most 10",
            ),
            (
                ObjectOptions::new().encryption(Encryption::Kms {
                    key_id: Some(String::new()),
                }),
                "KMS",
            ),
        ];
        for (options, expected) in refused {
            match options.validate() {
                Err(error) => assert!(error.to_string().contains(expected), "{error}"),
                Ok(()) => unreachable!("accepted {options:?}"),
            }
        }
        let fine = ObjectOptions::new()
            .content_type("text/csv; charset=utf-8")
            .metadata("Source-System", "erp")
            .tag("team", "finance")
            .encryption(Encryption::Kms { key_id: None });
        assert_eq!(fine.validate(), Ok(()));
        assert_eq!(
            fine.metadata_map().get("source-system").map(String::as_str),
            Some("erp")
        );
    }

    #[test]
    fn debug_does_not_show_a_kms_key() {
        let options = ObjectOptions::new().encryption(Encryption::Kms {
            key_id: Some("arn:aws:kms:eu-west-1:123456789012:key/abc".into()),
        });
        assert!(!format!("{options:?}").contains("123456789012"));
    }
}
