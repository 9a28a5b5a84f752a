// Registers an Avro schema through @confluentinc/schemaregistry, serializes a record with its
// AvroSerializer and reads it back with an AvroDeserializer whose client starts with an empty
// cache (so the schema comes from the registry by id), then tries a compatible and a breaking
// next version. Prints one JSON object on stdout; exits 1 with {"error": ...} on a failure.
//
// usage: node avro_roundtrip.js REGISTRY_URL TOPIC
'use strict';

const {
  AvroDeserializer,
  AvroSerializer,
  SchemaRegistryClient,
  SerdeType,
} = require('@confluentinc/schemaregistry');

const V1 = {
  type: 'record',
  name: 'Order',
  namespace: 'shop.js',
  fields: [
    { name: 'id', type: 'long' },
    { name: 'item', type: 'string' },
    { name: 'price', type: 'double' },
    { name: 'tags', type: { type: 'array', items: 'string' } },
  ],
};
// a new field with a default: BACKWARD compatible
const V2 = { ...V1, fields: [...V1.fields, { name: 'note', type: 'string', default: '' }] };
// a new field without a default: refused under BACKWARD
const BREAKING = { ...V1, fields: [...V1.fields, { name: 'qty', type: 'int' }] };

const RECORD = { id: 42, item: 'ünïcode kettle', price: 19.5, tags: ['kitchen', 'sale'] };

async function main(url, topic) {
  const subject = `${topic}-value`;
  const client = new SchemaRegistryClient({ baseURLs: [url], maxRetries: 0 });

  const id = await client.register(subject, { schemaType: 'AVRO', schema: JSON.stringify(V1) });
  const latest = await client.getLatestSchemaMetadata(subject);

  const ser = new AvroSerializer(client, SerdeType.VALUE, { autoRegisterSchemas: false, useLatestVersion: true });
  const bytes = await ser.serialize(topic, RECORD);

  // a second client: nothing cached, the deserializer must ask the registry for the id
  const reader = new SchemaRegistryClient({ baseURLs: [url], maxRetries: 0 });
  const deser = new AvroDeserializer(reader, SerdeType.VALUE, {});
  const decoded = await deser.deserialize(topic, bytes);

  const v2Id = await client.register(subject, { schemaType: 'AVRO', schema: JSON.stringify(V2) });
  let breaking = null;
  try {
    await client.register(subject, { schemaType: 'AVRO', schema: JSON.stringify(BREAKING) });
    breaking = { refused: false };
  } catch (e) {
    breaking = { refused: true, status: e.status ?? null, errorCode: e.errorCode ?? null, message: e.message };
  }
  const versions = await client.getAllVersions(subject);

  return {
    subject,
    id,
    latest: { id: latest.id, version: latest.version, schemaType: latest.schemaType ?? 'AVRO' },
    bytesHex: bytes.toString('hex'),
    decoded: { ...decoded, id: Number(decoded.id) },
    v2Id,
    breaking,
    versions,
  };
}

const [url, topic] = process.argv.slice(2);
if (!url || !topic) {
  process.stderr.write('usage: node avro_roundtrip.js REGISTRY_URL TOPIC\n');
  process.exit(2);
}
main(url, topic).then(
  (out) => process.stdout.write(JSON.stringify(out) + '\n'),
  (e) => {
    process.stdout.write(JSON.stringify({ error: String((e && e.stack) || e) }) + '\n');
    process.exit(1);
  },
);
