#![doc = include_str!("../README.md")]

pub mod book;
pub mod payload;
pub mod schema;
pub mod treasury;

pub use treasury::Treasury;
