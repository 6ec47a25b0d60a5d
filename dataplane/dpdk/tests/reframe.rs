//! `Mbuf::reframe` on a real mbuf (EAL on ordinary memory, no device): the encapsulation's one
//! step that drops the old link header and padding and makes room for new headers. What it
//! keeps is the inner packet, byte for byte, behind the new room; what it refuses, it leaves
//! untouched. One test function: EAL starts once per process.

mod common;

use spillway_dpdk::{MbufBurst, Mempool, WriteError};

#[test]
fn reframe_keeps_the_inner_bytes_behind_new_room_and_refuses_without_changing_anything() {
    let (eal, prefix) = common::eal("reframe-test");
    let pool = Mempool::create(&eal, "reframe-test", 63, 0).expect("mempool");
    let mut burst = MbufBurst::new();
    assert!(pool.alloc_bulk(&mut burst, 1));
    let mut m = burst.drain().next().expect("one mbuf");
    // A 64-byte frame: a 14-byte link header, a 40-byte packet, 10 bytes of padding.
    m.append(64).expect("room for 64 bytes").iter_mut().enumerate().for_each(|(i, b)| {
        *b = i as u8;
    });
    let headroom = m.headroom();
    assert!(headroom >= 34, "DPDK's default headroom leaves room for an outer header");

    // Too little headroom for the new room: refused, nothing changed.
    let too_much = u16::try_from(headroom + 14 + 1).expect("small");
    assert_eq!(m.reframe(14, 40, too_much).err(), Some(WriteError::NoRoom));
    // More bytes kept than the frame holds past `front`: refused, nothing changed.
    assert_eq!(m.reframe(14, 51, 34).err(), Some(WriteError::NoRoom));
    assert_eq!((m.headroom(), m.data_len(), m.pkt_len()), (headroom, 64, 64));
    assert_eq!(m.data()[..64], (0..64).collect::<Vec<u8>>()[..]);

    // Keep the packet (bytes 14..54), drop the padding, 34 bytes of room in front of it.
    let frame = m.reframe(14, 40, 34).expect("reframed");
    assert_eq!(frame.len(), 74);
    frame[..34].fill(0xee);
    assert_eq!((m.headroom(), m.data_len(), m.pkt_len()), (headroom + 14 - 34, 74, 74));
    assert_eq!(m.data()[..34], [0xee; 34]);
    assert_eq!(m.data()[34..], (14..54).collect::<Vec<u8>>()[..], "the inner packet, unchanged");

    drop(m);
    drop(burst);
    assert_eq!(pool.in_use(), 0);
    drop(eal);
    common::remove_runtime_dir(&prefix);
}
