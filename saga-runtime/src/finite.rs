//! Whether a value's numbers survive JSON. serde_json writes NaN and the
//! infinities as `null`, silently, and `null` then fails to decode as a
//! float (or decodes as `None`): a value that held one is not the value
//! that comes back. A walk over the value with a serializer that writes
//! nothing finds them before anything is stored, for values whose type the
//! engine does not know (event payloads).

use serde::ser::{self, Serialize};

/// Refuses a value holding a NaN or an infinite float; says where.
pub(crate) fn check_finite<T: Serialize + ?Sized>(value: &T) -> Result<(), String> {
    crate::panic::catch(|| value.serialize(&mut Walk))
        .map_err(|panic| format!("its Serialize panicked: {panic}"))?
        .map_err(|NotFinite(path)| NotFinite(path.map(|p| if p.is_empty() { "the top".to_owned() } else { p })))
        .or_else(|NotFinite(path)| match path {
            Some(path) => Err(format!(
                "it holds a non-finite float (NaN or an infinity) at {path}, which JSON writes as null"
            )),
            // Its `Serialize` failed otherwise: encoding it reports that.
            None => Ok(()),
        })
}

/// A non-finite float, at a path like `.amount[3]` (`the top` when the
/// value is the float); `None` when the value's `Serialize` failed.
#[derive(Debug)]
struct NotFinite(Option<String>);

impl std::fmt::Display for NotFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(path) => write!(f, "a non-finite float at {path}"),
            None => f.write_str("its Serialize failed"),
        }
    }
}

impl std::error::Error for NotFinite {}

impl ser::Error for NotFinite {
    // Another error of the value's `Serialize`: not ours to report here;
    // encoding the value reports it.
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        NotFinite(None)
    }
}

/// The walk. The path of a float found is built on the way out (each
/// level prefixes its field or index), so a finite value costs no
/// allocation per field.
struct Walk;

type Answer = Result<(), NotFinite>;

impl Walk {
    fn float(&self, finite: bool) -> Answer {
        if finite {
            return Ok(());
        }
        Err(NotFinite(Some(String::new())))
    }

    fn nested<T: Serialize + ?Sized>(
        &mut self,
        step: impl FnOnce() -> String,
        value: &T,
    ) -> Answer {
        match value.serialize(&mut *self) {
            Err(NotFinite(Some(inner))) => Err(NotFinite(Some(step() + &inner))),
            other => other,
        }
    }
}

macro_rules! plain {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(fn $method(self, _: $ty) -> Answer { Ok(()) })*
    };
}

impl<'a> ser::Serializer for &'a mut Walk {
    type Ok = ();
    type Error = NotFinite;
    type SerializeSeq = Elements<'a>;
    type SerializeTuple = Elements<'a>;
    type SerializeTupleStruct = Elements<'a>;
    type SerializeTupleVariant = Elements<'a>;
    type SerializeMap = Elements<'a>;
    type SerializeStruct = Elements<'a>;
    type SerializeStructVariant = Elements<'a>;

    plain! {
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_i128: i128, serialize_u8: u8, serialize_u16: u16,
        serialize_u32: u32, serialize_u64: u64, serialize_u128: u128, serialize_char: char,
        serialize_str: &str, serialize_bytes: &[u8], serialize_unit_struct: &'static str,
    }

    fn serialize_f32(self, v: f32) -> Answer {
        self.float(v.is_finite())
    }
    fn serialize_f64(self, v: f64) -> Answer {
        self.float(v.is_finite())
    }
    fn serialize_none(self) -> Answer {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Answer {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Answer {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Answer {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Answer {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Answer {
        self.nested(|| format!(".{variant}"), value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Elements<'a>, NotFinite> {
        Ok(Elements::new(self))
    }
    fn serialize_tuple(self, _: usize) -> Result<Elements<'a>, NotFinite> {
        Ok(Elements::new(self))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Elements<'a>, NotFinite> {
        Ok(Elements::new(self))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Elements<'a>, NotFinite> {
        Ok(Elements::new(self))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Elements<'a>, NotFinite> {
        Ok(Elements::new(self))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Elements<'a>, NotFinite> {
        Ok(Elements::new(self))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Elements<'a>, NotFinite> {
        Ok(Elements::new(self))
    }
}

/// The elements of a sequence, map or struct, counted for the path.
struct Elements<'a> {
    walk: &'a mut Walk,
    index: usize,
}

impl<'a> Elements<'a> {
    fn new(walk: &'a mut Walk) -> Self {
        Elements { walk, index: 0 }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Answer {
        let index = self.index;
        self.index += 1;
        self.walk.nested(|| format!("[{index}]"), value)
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Answer {
        self.walk.nested(|| format!(".{name}"), value)
    }
}

macro_rules! elements {
    ($($trait:ident),*) => {$(
        impl ser::$trait for Elements<'_> {
            type Ok = ();
            type Error = NotFinite;
            fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Answer {
                self.element(value)
            }
            fn end(self) -> Answer {
                Ok(())
            }
        }
    )*};
}
elements!(SerializeSeq, SerializeTuple);

macro_rules! fields {
    ($($trait:ident),*) => {$(
        impl ser::$trait for Elements<'_> {
            type Ok = ();
            type Error = NotFinite;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Answer {
                self.element(value)
            }
            fn end(self) -> Answer {
                Ok(())
            }
        }
    )*};
}
fields!(SerializeTupleStruct, SerializeTupleVariant);

macro_rules! named_fields {
    ($($trait:ident),*) => {$(
        impl ser::$trait for Elements<'_> {
            type Ok = ();
            type Error = NotFinite;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Answer {
                self.field(name, value)
            }
            fn end(self) -> Answer {
                Ok(())
            }
        }
    )*};
}
named_fields!(SerializeStruct, SerializeStructVariant);

impl ser::SerializeMap for Elements<'_> {
    type Ok = ();
    type Error = NotFinite;
    // Keys are strings in JSON (a float key is refused by the encoder).
    fn serialize_key<T: Serialize + ?Sized>(&mut self, _: &T) -> Answer {
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Answer {
        self.element(value)
    }
    fn end(self) -> Answer {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::check_finite;

    #[derive(serde::Serialize)]
    struct Reading {
        name: &'static str,
        values: Vec<f64>,
    }

    #[test]
    fn finds_a_nan_and_says_where() {
        let ok = Reading {
            name: "a",
            values: vec![1.0, 2.5],
        };
        assert!(check_finite(&ok).is_ok());
        let bad = Reading {
            name: "a",
            values: vec![1.0, f64::NAN],
        };
        let error = check_finite(&bad).unwrap_err();
        assert!(error.contains(".values[1]"), "{error}");
        assert!(
            check_finite(&f32::INFINITY)
                .unwrap_err()
                .contains("the top")
        );
        assert!(check_finite(&Some(f64::NEG_INFINITY)).is_err());
    }
}
