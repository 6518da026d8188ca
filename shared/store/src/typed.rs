//! Typed documents over the store: a document type knows its collection and
//! the id of a value ([`Doc`]), and the helpers read, decode and buffer
//! writes of such types, so callers never spell a collection name.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{DocKey, Document, Precondition, Store, StoreError, StoreExt, Txn};

/// A document type: its collection and the id of a value.
pub trait Doc: Serialize + DeserializeOwned {
    const COLLECTION: &'static str;
    fn doc_id(&self) -> String;

    fn key(&self) -> Result<DocKey, StoreError> {
        DocKey::new(Self::COLLECTION, self.doc_id())
    }
}

/// The key of document `id` of type `T`.
pub fn key<T: Doc>(id: &str) -> Result<DocKey, StoreError> {
    DocKey::new(T::COLLECTION, id)
}

/// Decodes a stored document into `T`.
pub fn decode<T: Doc>(doc: &Document) -> Result<T, StoreError> {
    doc.decode()
}

/// Reads document `id` of type `T`, outside a transaction.
pub async fn get<T: Doc>(store: &dyn Store, id: &str) -> Result<Option<T>, StoreError> {
    store.get_one(&key::<T>(id)?).await?.map(|d| d.decode()).transpose()
}

/// Writes `value` whatever is stored under its id, outside a transaction.
pub async fn put<T: Doc>(store: &dyn Store, value: &T) -> Result<(), StoreError> {
    store.put(&value.key()?, crate::encode(value)?, Precondition::None).await.map(|_| ())
}

/// Reads document `id` of type `T` in a transaction.
pub async fn tx_get<T: Doc>(tx: &mut Txn<'_>, id: &str) -> Result<Option<T>, StoreError> {
    tx.get(&key::<T>(id)?).await?.map(|d| d.decode()).transpose()
}

/// Buffers a replace of `value` in a transaction.
pub fn tx_put<T: Doc>(tx: &mut Txn<'_>, value: &T) -> Result<(), StoreError> {
    tx.put(&value.key()?, crate::encode(value)?, Precondition::None);
    Ok(())
}

/// Buffers a create of `value` in a transaction (the commit fails with
/// `AlreadyExists` if it is there).
pub fn tx_create<T: Doc>(tx: &mut Txn<'_>, value: &T) -> Result<(), StoreError> {
    tx.create(&value.key()?, crate::encode(value)?);
    Ok(())
}
