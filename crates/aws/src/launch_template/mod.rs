//! Launch templates.
