//! Rewrite paths: parse any text; for one that parses, render it from the values any path
//! gives a template (and from arbitrary values): never a panic, and a rendered path is always
//! a valid upstream path that carries single-segment values back intact.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portico_control::template::{render_path, render_rewrite, PathTemplate, Rewrite};

fuzz_target!(|data: &[u8]| {
    let f = portico_fuzz::fields(data, 4);
    let (rewrite, template, path, value) = (&f[0], &f[1], &f[2], &f[3]);
    let Ok(r) = Rewrite::parse(rewrite) else {
        assert!(render_path(rewrite, &[]).is_err());
        return;
    };
    let fields: Vec<String> = r.fields().map(str::to_owned).collect();
    // Arbitrary values, one per placeholder.
    let vars: Vec<(String, String)> = fields.iter().map(|f| (f.clone(), value.clone())).collect();
    match render_path(rewrite, &vars) {
        Ok(out) => assert!(portico_fuzz::is_valid_upstream_path(&out), "{out:?}"),
        Err(e) => panic!("{rewrite:?} with all its values: {e}"),
    }
    if let Ok(t) = PathTemplate::parse(template) {
        if let Some(matched) = t.match_path(path) {
            match render_rewrite(rewrite, &t, &matched) {
                Ok(out) => assert!(portico_fuzz::is_valid_upstream_path(&out), "{out:?}"),
                Err(_) => assert!(fields.iter().any(|f| t.variable(f).is_none())),
            }
        }
        if let Ok(out) = r.render(&t, &vars) {
            assert!(portico_fuzz::is_valid_upstream_path(&out), "{out:?}");
        }
    }
});
