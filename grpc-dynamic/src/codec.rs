//! tonic [`Codec`]s without generated code: [`DynamicCodec`] for prost-reflect messages (it
//! encodes any [`DynamicMessage`] and decodes the one message type it was made for, so a
//! client or a server needs only a descriptor). (The gateway's own client moves encoded
//! bytes and needs no codec: `gateway/src/invoke/grpc_client.rs`.)

use bytes::Buf;
use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// Which end of a call a codec serves: it decides what the messages are called in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Encodes requests, decodes replies.
    Client,
    /// Decodes requests, encodes replies.
    Server,
}

/// A tonic codec for prost-reflect messages: encodes any [`DynamicMessage`], decodes the
/// message type it was made for.
#[derive(Debug, Clone)]
pub struct DynamicCodec {
    decode: MessageDescriptor,
    side: Side,
}

impl DynamicCodec {
    /// A client's codec: encodes requests, decodes replies of type `reply`.
    pub fn client(reply: MessageDescriptor) -> Self {
        DynamicCodec {
            decode: reply,
            side: Side::Client,
        }
    }

    /// A server's codec: decodes requests of type `request`, encodes replies.
    pub fn server(request: MessageDescriptor) -> Self {
        DynamicCodec {
            decode: request,
            side: Side::Server,
        }
    }
}

impl Codec for DynamicCodec {
    type Encode = DynamicMessage;
    type Decode = DynamicMessage;
    type Encoder = DynamicEncoder;
    type Decoder = DynamicDecoder;

    fn encoder(&mut self) -> DynamicEncoder {
        DynamicEncoder(self.side)
    }

    fn decoder(&mut self) -> DynamicDecoder {
        DynamicDecoder(self.decode.clone(), self.side)
    }
}

/// Encodes a [`DynamicMessage`].
#[derive(Debug)]
pub struct DynamicEncoder(Side);

impl Encoder for DynamicEncoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn encode(&mut self, item: DynamicMessage, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // EncodeBuf grows on demand; reserve so prost's capacity check passes.
        dst.reserve(item.encoded_len());
        item.encode(dst).map_err(|e| {
            let what = match self.0 {
                Side::Client => "the request",
                Side::Server => "the reply",
            };
            Status::internal(format!("encoding {what}: {e}"))
        })
    }
}

/// Decodes a [`DynamicMessage`] of one type.
#[derive(Debug)]
pub struct DynamicDecoder(MessageDescriptor, Side);

impl Decoder for DynamicDecoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DynamicMessage>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        DynamicMessage::decode(self.0.clone(), bytes)
            .map(Some)
            .map_err(|e| {
                let what = match self.1 {
                    Side::Client => "the reply",
                    Side::Server => "the request",
                };
                Status::internal(format!("{what} does not decode: {e}"))
            })
    }
}
