mod manifest;
fn main() {}
