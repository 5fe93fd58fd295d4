use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::*;
use crate::proxy::drain::Drain;

/// Bounds every wait in these tests.
const BOUND: Duration = Duration::from_secs(5);

struct Fixture {
    lot: Arc<Lot<u32>>,
    drain: Drain,
    reclaim: Arc<Reclaim>,
    woken: mpsc::UnboundedReceiver<Woken<u32>>,
    listener: tokio::net::TcpListener,
}

async fn fixture(drain_wait: Duration) -> Fixture {
    let (lot, poll) = Lot::new(());
    let drain = Drain::new();
    let reclaim = Reclaim::new();
    let (tx, woken) = mpsc::unbounded_channel();
    tokio::spawn(lot.clone().run(
        poll.unwrap(),
        drain.token(),
        reclaim.clone(),
        drain_wait,
        move |w| {
            let _ = tx.send(w);
        },
    ));
    // The lot's task has started (and taken its waker) before anything parks.
    tokio::task::yield_now().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    Fixture {
        lot,
        drain,
        reclaim,
        woken,
        listener,
    }
}

impl Fixture {
    /// A client and the server side of its connection, out of the runtime for parking.
    async fn pair(&self) -> (tokio::net::TcpStream, std::net::TcpStream) {
        let client = tokio::net::TcpStream::connect(self.listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, self.listener.accept());
        (client.unwrap(), accepted.unwrap().0.into_std().unwrap())
    }

    /// A connection parked with `value`, its deadline `after` from now.
    async fn parked(&self, value: u32, after: Duration) -> (tokio::net::TcpStream, Registration) {
        let (client, server) = self.pair().await;
        let reclaim = self.reclaim.register();
        reclaim.wait(std::time::Instant::now());
        let parked = self
            .lot
            .park(server, Instant::now() + after, reclaim.clone(), value);
        assert!(parked.is_ok());
        (client, reclaim)
    }

    async fn next(&mut self) -> Woken<u32> {
        tokio::time::timeout(BOUND, self.woken.recv())
            .await
            .expect("woken in time")
            .expect("the lot's task is running")
    }
}

/// The client sees the connection closed (FIN) within `BOUND`.
async fn closed(client: &mut tokio::net::TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(BOUND, client.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// The client sees nothing from the connection for 200 ms: neither bytes nor a close.
async fn still_open(client: &mut tokio::net::TcpStream) -> bool {
    let mut byte = [0u8; 1];
    tokio::time::timeout(Duration::from_millis(200), client.read(&mut byte))
        .await
        .is_err()
}

#[tokio::test]
async fn a_parked_connection_comes_back_when_its_client_sends_with_the_bytes_unread() {
    let mut f = fixture(Duration::from_secs(1)).await;
    let (mut quiet, _) = f.parked(1, Duration::from_secs(30)).await;
    let (mut sends, _) = f.parked(2, Duration::from_secs(30)).await;
    assert_eq!(f.lot.len(), 2);
    sends.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    let Woken::Ready {
        mut tcp,
        value,
        reclaim,
        ..
    } = f.next().await
    else {
        panic!("not handed back as ready");
    };
    assert_eq!(value, 2);
    assert!(!reclaim.is_closed());
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(BOUND, tcp.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\n");
    // The stream works as any other: an answer reaches the client.
    tcp.write_all(b"ok").await.unwrap();
    let n = tokio::time::timeout(BOUND, sends.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..n], b"ok");
    assert_eq!(f.lot.len(), 1);
    // The other one stays parked and open.
    assert!(still_open(&mut quiet).await);
}

#[tokio::test]
async fn a_client_that_hangs_up_while_parked_is_handed_back() {
    let mut f = fixture(Duration::from_secs(1)).await;
    let (client, _) = f.parked(7, Duration::from_secs(30)).await;
    drop(client);
    let Woken::Ready { mut tcp, value, .. } = f.next().await else {
        panic!("not handed back as ready");
    };
    assert_eq!(value, 7);
    let mut buf = [0u8; 8];
    assert_eq!(tcp.read(&mut buf).await.unwrap(), 0);
    assert_eq!(f.lot.len(), 0);
}

#[tokio::test]
async fn a_parked_connection_is_closed_at_its_deadline_and_not_before() {
    let f = fixture(Duration::from_secs(1)).await;
    let (mut later, _) = f.parked(1, Duration::from_secs(30)).await;
    let started = std::time::Instant::now();
    let (mut client, _) = f.parked(2, Duration::from_millis(400)).await;
    assert!(closed(&mut client).await);
    let after = started.elapsed();
    assert!(after >= Duration::from_millis(390), "{after:?}");
    assert_eq!(f.lot.len(), 1);
    assert!(still_open(&mut later).await);
}

#[tokio::test]
async fn a_sooner_deadline_parked_later_wakes_the_lot_sooner() {
    let f = fixture(Duration::from_secs(1)).await;
    let (_far, _) = f.parked(1, Duration::from_secs(30)).await;
    // The lot's timer is at 30 s now: a 300 ms deadline must re-arm it.
    tokio::task::yield_now().await;
    let started = std::time::Instant::now();
    let (mut near, _) = f.parked(2, Duration::from_millis(300)).await;
    assert!(closed(&mut near).await);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_connection_the_accept_loop_closes_is_handed_back_as_reclaimed() {
    let mut f = fixture(Duration::from_secs(1)).await;
    let (_client, reclaim) = f.parked(3, Duration::from_secs(30)).await;
    assert_eq!(f.reclaim.close_longest_waiting(1), 1);
    assert!(reclaim.is_closed());
    let Woken::Reclaimed(value) = f.next().await else {
        panic!("not handed back as reclaimed");
    };
    assert_eq!(value, 3);
    assert_eq!(f.lot.len(), 0);
}

#[tokio::test]
async fn a_connection_closed_by_the_accept_loop_just_before_it_parks_is_reclaimed() {
    let mut f = fixture(Duration::from_secs(1)).await;
    let (_client, server) = f.pair().await;
    let reclaim = f.reclaim.register();
    reclaim.wait(std::time::Instant::now());
    // Closed while the connection's own task still waited: its waker, not the lot's.
    assert_eq!(f.reclaim.close_longest_waiting(1), 1);
    assert!(
        f.lot
            .park(server, Instant::now() + Duration::from_secs(30), reclaim, 4)
            .is_ok()
    );
    let Woken::Reclaimed(value) = f.next().await else {
        panic!("not handed back as reclaimed");
    };
    assert_eq!(value, 4);
}

#[tokio::test]
async fn on_drain_parked_connections_get_the_drain_wait_then_close_and_parking_stops() {
    let mut f = fixture(Duration::from_millis(500)).await;
    let (mut silent, _) = f.parked(1, Duration::from_secs(30)).await;
    let (mut sends, _) = f.parked(2, Duration::from_secs(30)).await;
    let started = std::time::Instant::now();
    f.drain.start();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Within the drain's wait a request still comes back to be answered.
    sends.write_all(b"GET").await.unwrap();
    assert!(matches!(f.next().await, Woken::Ready { value: 2, .. }));
    assert!(closed(&mut silent).await);
    let after = started.elapsed();
    assert!(after >= Duration::from_millis(490), "{after:?}");
    // The lot's task has ended: a connection that would park now waits in its own task.
    tokio::time::timeout(BOUND, f.woken.recv()).await.unwrap();
    let (_client, server) = f.pair().await;
    let reclaim = f.reclaim.register();
    assert!(
        f.lot
            .park(server, Instant::now() + Duration::from_secs(30), reclaim, 5)
            .is_err()
    );
}

#[tokio::test]
async fn when_the_drain_closes_every_parked_connection_is_closed() {
    let f = fixture(Duration::from_secs(30)).await;
    let (mut a, _) = f.parked(1, Duration::from_secs(30)).await;
    let (mut b, _) = f.parked(2, Duration::from_secs(30)).await;
    let token = f.drain.token();
    let drain = tokio::spawn(async move { f.drain.drain(Duration::from_millis(100)).await });
    drop(token);
    assert!(closed(&mut a).await);
    assert!(closed(&mut b).await);
    tokio::time::timeout(BOUND, drain).await.unwrap().unwrap();
    assert_eq!(f.lot.len(), 0);
}

/// Connections that park and wake many times within one idle timeout leave their deadlines
/// in the heap; the heap is swept so it stays proportional to what is parked.
#[tokio::test]
async fn deadlines_of_woken_connections_do_not_pile_up() {
    let mut f = fixture(Duration::from_secs(1)).await;
    let (mut client, server) = f.pair().await;
    let reclaim = f.reclaim.register();
    let mut server = Some(server);
    for round in 0..500u32 {
        let parked = f.lot.park(
            server.take().unwrap(),
            Instant::now() + Duration::from_secs(60),
            reclaim.clone(),
            round,
        );
        assert!(parked.is_ok());
        client.write_all(b"x").await.unwrap();
        let Woken::Ready { tcp, .. } = f.next().await else {
            panic!("round {round}: not ready");
        };
        let mut tcp = tcp;
        let mut byte = [0u8; 1];
        tcp.read_exact(&mut byte).await.unwrap();
        server = Some(tcp.into_std().unwrap());
    }
    let due = f.lot.lock().due.len();
    assert!(due <= 2 * 64 + 2, "{due} deadlines kept for one connection");
}

/// A crowd of parked connections that all leave gives back the slab and heap it needed.
#[tokio::test]
async fn an_emptied_lot_gives_back_what_a_crowd_needed() {
    let mut f = fixture(Duration::from_secs(1)).await;
    let mut clients = Vec::new();
    for i in 0..300u32 {
        clients.push(f.parked(i, Duration::from_secs(30)).await.0);
    }
    assert!(f.lot.lock().entries.capacity() >= 300);
    for c in &mut clients {
        c.write_all(b"x").await.unwrap();
    }
    for _ in 0..300 {
        assert!(matches!(f.next().await, Woken::Ready { .. }));
    }
    let state = f.lot.lock();
    assert!(state.entries.is_empty());
    assert!(
        state.entries.capacity() <= KEEP_EMPTY,
        "{}",
        state.entries.capacity()
    );
    assert!(
        state.due.capacity() <= KEEP_EMPTY,
        "{}",
        state.due.capacity()
    );
}
