//! Every allocator hands out scratch that is aligned (`alignment`),
//! disjoint and intact until the reset (`patterns`), typed (`typed`) and
//! counted (`stats`), and collections grow in it (`vec_in`,
//! `grow_in_place`, `hashbrown_map`, `dyn_stack`).

mod alignment;
mod patterns;
mod stats;
mod typed;

#[cfg(all(feature = "std", feature = "dyn-stack"))]
mod dyn_stack;
#[cfg(feature = "std")]
mod grow_in_place;
#[cfg(feature = "std")]
mod hashbrown_map;
#[cfg(feature = "std")]
mod vec_in;
