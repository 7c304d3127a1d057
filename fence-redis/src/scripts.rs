//! The Lua scripts, one per operation, each the shared prelude plus its body.

use std::sync::LazyLock;

const PRELUDE: &str = include_str!("lua/prelude.lua");
const ENVELOPE: &str = include_str!("lua/fenced.lua");
const BODY_MARKER: &str = "--BODY--";
/// The envelope's `sets_mark` flag, false unless the body writes the mark itself (the write).
const SETS_MARK_FLAG: &str = "false --[[SETS_MARK]]";

/// A script with its SHA1, called by `EVALSHA` with an `EVAL` fallback on `NOSCRIPT`.
#[derive(Debug)]
pub(crate) struct LuaScript {
    pub(crate) name: &'static str,
    pub(crate) code: String,
    pub(crate) sha: String,
}

impl LuaScript {
    pub(crate) fn with_prelude(name: &'static str, body: &str) -> Self {
        Self::compose(name, "", body)
    }

    /// A script of its own, without the prelude.
    pub(crate) fn bare(name: &'static str, code: &str) -> Self {
        let sha = redis::Script::new(code).get_hash().to_owned();
        LuaScript {
            name,
            code: code.to_owned(),
            sha,
        }
    }

    fn compose(name: &'static str, preamble: &str, body: &str) -> Self {
        let code = format!("{preamble}{PRELUDE}\n{body}");
        let sha = redis::Script::new(&code).get_hash().to_owned();
        LuaScript { name, code, sha }
    }

    /// A fenced body in the envelope (`lua/fenced.lua`), after the prelude and `helpers`.
    pub(crate) fn fenced(name: &'static str, helpers: &str, body: &str) -> Self {
        Self::fenced_with_user(name, "", helpers, body)
    }

    /// A fenced body that calls `fenced_user_script(KEYS, ARGV)`: `user_lua` as a function
    /// defined before everything else, so it sees none of the prelude's, the helpers', the
    /// envelope's or the body's variables and can overwrite none of them.
    pub(crate) fn fenced_with_user(
        name: &'static str,
        user_lua: &str,
        helpers: &str,
        body: &str,
    ) -> Self {
        let preamble = if user_lua.is_empty() {
            String::new()
        } else {
            format!("local fenced_user_script = function(KEYS, ARGV)\n{user_lua}\nend\n")
        };
        let envelope = ENVELOPE.replacen(BODY_MARKER, body, 1);
        Self::compose(name, &preamble, &format!("{helpers}\n{envelope}"))
    }

    /// The fenced body that runs a user's Lua with the user's own KEYS and ARGV.
    pub(crate) fn fenced_user_script(name: &'static str, user_lua: &str) -> Self {
        let body = include_str!("lua/fenced_script.lua");
        Self::fenced_with_user(name, user_lua, "", body)
    }
}

/// The fenced write: its body writes the mark and the entry in one `HSET` (`sets_mark`).
pub(crate) static WRITE: LazyLock<LuaScript> = LazyLock::new(|| {
    let body = include_str!("lua/write.lua");
    let envelope = ENVELOPE
        .replacen(BODY_MARKER, body, 1)
        .replacen(SETS_MARK_FLAG, "true", 1);
    LuaScript::compose("write", "", &format!("\n{envelope}"))
});

macro_rules! fenced_scripts {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(
            pub(crate) static $name: LazyLock<LuaScript> =
                LazyLock::new(|| LuaScript::fenced($file, "", include_str!(concat!("lua/", $file, ".lua"))));
        )*
    };
}

macro_rules! scripts {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(
            pub(crate) static $name: LazyLock<LuaScript> =
                LazyLock::new(|| LuaScript::with_prelude($file, include_str!(concat!("lua/", $file, ".lua"))));
        )*
    };
}

fenced_scripts! {
    CLAIM => "claim",
    ADOPT => "adopt",
}

scripts! {
    READ => "read",
    LEASE_ACQUIRE => "lease_acquire",
    LEASE_RENEW => "lease_renew",
    LEASE_HOLDER => "lease_holder",
    ISSUE => "issue",
    REBASE => "rebase",
    BOUNDS => "bounds",
}

/// The retirement script: a bare script (no prelude), refusing under a live lease.
pub(crate) static RETIRE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::bare("retire", include_str!("lua/retire.lua")));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_write_writes_the_mark_itself() {
        assert!(WRITE.code.contains("local sets_mark = true"));
        assert!(!WRITE.code.contains(SETS_MARK_FLAG));
        for other in [&*CLAIM, &*ADOPT] {
            assert!(
                other.code.contains("local sets_mark = false"),
                "{}",
                other.name
            );
        }
    }
}
