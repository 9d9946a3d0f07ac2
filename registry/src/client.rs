//! A small client of the registry API, used by the `portico` CLI.
