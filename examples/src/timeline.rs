//! A timeline printer: each line stamped with the time since the story began.

use std::time::Instant;

/// Prints `+<ms>  <actor>  <what>` lines relative to when it was created.
#[derive(Clone, Copy, Debug)]
pub struct Timeline {
    start: Instant,
}

impl Timeline {
    /// Starts the clock.
    pub fn start() -> Self {
        Timeline {
            start: Instant::now(),
        }
    }

    /// Prints one event.
    pub fn say(&self, actor: &str, what: impl AsRef<str>) {
        let ms = self.start.elapsed().as_millis();
        println!("{:>7}  {actor:<2} {}", format!("+{ms}ms"), what.as_ref());
    }
}
