//! joiner-apis.
