//! Little-endian field access and the view macro shared by every format.
//!
//! Xen's structures are native-endian; splitnet targets x86-64, so native is
//! little-endian.

/// An integer that can sit in a wire structure.
pub(crate) trait WireInt: Sized + Copy {
    const N: usize;
    fn get(buf: &[u8], off: usize) -> Self;
    fn put(buf: &mut [u8], off: usize, v: Self);
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl WireInt for $t {
            const N: usize = std::mem::size_of::<$t>();
            #[inline]
            fn get(buf: &[u8], off: usize) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                b.copy_from_slice(&buf[off..off + Self::N]);
                <$t>::from_le_bytes(b)
            }
            #[inline]
            fn put(buf: &mut [u8], off: usize, v: Self) {
                buf[off..off + Self::N].copy_from_slice(&v.to_le_bytes());
            }
        }
    )*};
}
wire_int!(u8, u16, i16, u32, u64);

/// Defines a checked zero-copy view over a fixed-layout structure.
///
/// `new_checked` verifies the length once; the accessors then only touch
/// bytes below `SIZE` and cannot panic.
macro_rules! wire_view {
    (
        $(#[$meta:meta])*
        $view:ident, $layout:ident, {
            $( $(#[$fmeta:meta])* $get:ident / $set:ident : $ty:ty = $off:ident ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $view<T: AsRef<[u8]>> {
            buf: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// Size of the structure in bytes.
            pub const SIZE: usize = $layout::SIZEOF;

            /// Wraps `buf` after checking it holds at least `SIZE` bytes.
            pub fn new_checked(buf: T) -> Result<Self, $crate::Error> {
                let got = buf.as_ref().len();
                if got < Self::SIZE {
                    return Err($crate::Error::Truncated {
                        what: stringify!($view),
                        need: Self::SIZE,
                        got,
                    });
                }
                Ok(Self { buf })
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buf
            }

            $(
                $(#[$fmeta])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    <$ty as $crate::wire::WireInt>::get(self.buf.as_ref(), $layout::$off)
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = concat!("Sets the field read by [`Self::", stringify!($get), "`].")]
                #[inline]
                pub fn $set(&mut self, v: $ty) {
                    <$ty as $crate::wire::WireInt>::put(self.buf.as_mut(), $layout::$off, v)
                }
            )*
        }
    };
}
pub(crate) use wire_view;

/// Defines a flags newtype over raw bits with a set of named bits.
macro_rules! wire_flags {
    (
        $(#[$meta:meta])*
        $name:ident : $raw:ty, $field:literal {
            $( $(#[$fmeta:meta])* $flag:ident = $val:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name($raw);

        impl $name {
            $( $(#[$fmeta])* pub const $flag: Self = Self($val); )*
            /// Every bit this ABI defines for the field.
            pub const KNOWN: $raw = 0 $( | $val )*;
            /// No flags.
            pub const EMPTY: Self = Self(0);

            /// Accepts `bits` only if every set bit is defined.
            pub fn from_bits(bits: $raw) -> Result<Self, $crate::Error> {
                let unknown = bits & !Self::KNOWN;
                if unknown != 0 {
                    return Err($crate::Error::UnknownFlags {
                        field: $field,
                        value: u32::from(bits),
                        unknown: u32::from(unknown),
                    });
                }
                Ok(Self(bits))
            }
            /// Keeps `bits` as they are, defined or not (raw slot decoding).
            pub const fn from_bits_retain(bits: $raw) -> Self {
                Self(bits)
            }
            /// The raw bits.
            pub const fn bits(self) -> $raw {
                self.0
            }
            /// True when every bit of `other` is set.
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }
            /// True when no bit is set.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }
            /// `self` with the bits of `other` set or cleared.
            #[must_use]
            pub const fn with(self, other: Self, on: bool) -> Self {
                if on { Self(self.0 | other.0) } else { Self(self.0 & !other.0) }
            }
            /// Fails if any undefined bit is set.
            pub fn check(self) -> Result<(), $crate::Error> {
                Self::from_bits(self.0).map(|_| ())
            }
        }

        impl std::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self {
                Self(self.0 | rhs.0)
            }
        }
        impl std::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: Self) {
                self.0 |= rhs.0;
            }
        }
    };
}
pub(crate) use wire_flags;
