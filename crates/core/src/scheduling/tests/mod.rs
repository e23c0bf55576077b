//! Tests of the scheduling simulation: hand-made scenarios and property tests over generated
//! clusters. `simulation` also holds the small catalog and pod builders the others share.

mod constraint_properties;
mod constraint_tests;
mod disruption_properties;
mod properties;
mod simulation;
