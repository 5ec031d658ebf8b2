//! Splitting a group of tickets into balanced teams (parties whole, roles satisfied).
