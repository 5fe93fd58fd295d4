//! A field of an object as kubectl names it (`spec.rules[0].backendRef`), and a field an
//! object has that its kind does not (what manifests report; `manifest::fields` finds them).

use std::fmt;

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A field the object's kind does not have (ignored, as the API server would prune it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownField {
    pub path: Vec<Step>,
    /// The field of the same object the author most likely meant (`backendRefs`).
    pub nearest: Option<String>,
}

// === impl UnknownField ===

/// `spec.rules[0].backendRef (did you mean backendRefs?)`.
impl fmt::Display for UnknownField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Path(&self.path))?;
        if let Some(n) = &self.nearest {
            write!(f, " (did you mean {n}?)")?;
        }
        Ok(())
    }
}

/// A field path as kubectl writes it: `spec.rules[0].backendRef`.
pub struct Path<'p>(pub &'p [Step]);

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            match step {
                Step::Key(k) if i == 0 => f.write_str(k)?,
                Step::Key(k) => write!(f, ".{k}")?,
                Step::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}
