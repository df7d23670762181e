//! Go text/template compatible engine with sprig and the Sveltos functions, and Tera as a second syntax.
