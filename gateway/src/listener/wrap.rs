//! Connection wrappers of the traffic listeners: [`Raw`], a Pingora `Stream` as a concrete
//! `IO` type (what Pingora's TLS acceptor takes), and the delegation of Pingora's `IO` bundle
//! to an inner `Stream` that every wrapper here shares.

use pingora_core::protocols::Stream;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// Implements `AsyncWrite` for `$ty` by delegating to its `inner: Stream` field.
macro_rules! delegate_write {
    ($ty:ty) => {
        impl tokio::io::AsyncWrite for $ty {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
            }
        }
    };
}

/// Implements Pingora's `IO` bundle (all but `AsyncRead` and `AsyncWrite`) for `$ty` by
/// delegating to its `inner: Stream` field.
macro_rules! delegate_io {
    ($ty:ty) => {
        #[async_trait::async_trait]
        impl pingora_core::protocols::Shutdown for $ty {
            async fn shutdown(&mut self) {
                pingora_core::protocols::Shutdown::shutdown(&mut *self.inner).await;
            }
        }

        impl pingora_core::protocols::UniqueID for $ty {
            fn id(&self) -> pingora_core::protocols::UniqueIDType {
                self.inner.id()
            }
        }

        impl pingora_core::protocols::Ssl for $ty {
            fn get_ssl(&self) -> Option<&pingora_core::protocols::tls::TlsRef> {
                self.inner.get_ssl()
            }

            fn get_ssl_digest(
                &self,
            ) -> Option<std::sync::Arc<pingora_core::protocols::tls::SslDigest>> {
                self.inner.get_ssl_digest()
            }

            fn selected_alpn_proto(&self) -> Option<pingora_core::protocols::ALPN> {
                self.inner.selected_alpn_proto()
            }
        }

        impl pingora_core::protocols::GetTimingDigest for $ty {
            fn get_timing_digest(&self) -> Vec<Option<pingora_core::protocols::TimingDigest>> {
                self.inner.get_timing_digest()
            }

            fn get_read_pending_time(&self) -> std::time::Duration {
                self.inner.get_read_pending_time()
            }

            fn get_write_pending_time(&self) -> std::time::Duration {
                self.inner.get_write_pending_time()
            }
        }

        impl pingora_core::protocols::GetProxyDigest for $ty {
            fn get_proxy_digest(
                &self,
            ) -> Option<std::sync::Arc<pingora_core::protocols::raw_connect::ProxyDigest>> {
                self.inner.get_proxy_digest()
            }

            fn set_proxy_digest(
                &mut self,
                digest: pingora_core::protocols::raw_connect::ProxyDigest,
            ) {
                self.inner.set_proxy_digest(digest);
            }
        }

        impl pingora_core::protocols::GetSocketDigest for $ty {
            fn get_socket_digest(
                &self,
            ) -> Option<std::sync::Arc<pingora_core::protocols::SocketDigest>> {
                self.inner.get_socket_digest()
            }

            fn set_socket_digest(&mut self, socket_digest: pingora_core::protocols::SocketDigest) {
                self.inner.set_socket_digest(socket_digest);
            }
        }

        #[async_trait::async_trait]
        impl pingora_core::protocols::Peek for $ty {
            async fn try_peek(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
                self.inner.try_peek(buf).await
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.inner.fmt(f)
            }
        }
    };
}

pub(crate) use delegate_io;
pub(crate) use delegate_write;

/// A Pingora `Stream` as a concrete `IO` type: Pingora's TLS acceptor is generic over the
/// stream it encrypts, and `Box<dyn IO>` itself is not `IO`.
pub struct Raw {
    inner: Stream,
}

impl Raw {
    pub fn new(inner: Stream) -> Self {
        Raw { inner }
    }
}

impl AsyncRead for Raw {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

delegate_write!(Raw);
delegate_io!(Raw);
