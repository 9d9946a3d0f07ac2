//! The last-known-good snapshot on disk. (Being written.)
