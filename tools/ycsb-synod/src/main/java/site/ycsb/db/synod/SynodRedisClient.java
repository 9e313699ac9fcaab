package site.ycsb.db.synod;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;

import redis.clients.jedis.Jedis;
import redis.clients.jedis.params.ScanParams;
import redis.clients.jedis.resps.ScanResult;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;
import site.ycsb.StringByteIterator;

/**
 * YCSB binding for synod's Redis front end, with the record layout of YCSB's official redis
 * binding: one hash per record (HMSET key field value ...), read with HGETALL (all fields) or
 * HMGET (some), update with HMSET, delete with DEL. It works unchanged against a real
 * redis-server, which is how the two are compared.
 *
 * <p>Difference: the official binding also keeps a sorted set ("_indices", scored by the key's
 * hashCode) for scans, and synod has no sorted sets. Here a scan walks SCAN, whose cursor runs
 * in key order on synod, and keeps the first `recordcount` keys at or after `startkey` (cost
 * proportional to the keys before `startkey`; on redis-server the SCAN order is arbitrary, so
 * workload E is only meaningful against synod). Inserts therefore issue one command instead
 * of two.
 *
 * <p>Properties: redis.host (127.0.0.1), redis.port (7401), redis.password (none),
 * redis.timeout (ms, 30000). One connection per YCSB thread.
 */
public class SynodRedisClient extends DB {
  private Jedis jedis;

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    String host = p.getProperty("redis.host", "127.0.0.1");
    int port = Integer.parseInt(p.getProperty("redis.port", "7401"));
    int timeout = Integer.parseInt(p.getProperty("redis.timeout", "30000"));
    try {
      jedis = new Jedis(host, port, timeout);
      String password = p.getProperty("redis.password");
      if (password != null) {
        jedis.auth(password);
      }
      jedis.ping();
    } catch (RuntimeException e) {
      throw new DBException("cannot connect to " + host + ":" + port + ": " + e.getMessage(), e);
    }
  }

  @Override
  public void cleanup() throws DBException {
    if (jedis != null) {
      jedis.close();
    }
  }

  @Override
  public Status read(String table, String key, Set<String> fields, Map<String, ByteIterator> result) {
    try {
      if (fields == null) {
        Map<String, String> all = jedis.hgetAll(key);
        if (all.isEmpty()) {
          return Status.NOT_FOUND;
        }
        StringByteIterator.putAllAsByteIterators(result, all);
      } else {
        String[] names = fields.toArray(new String[0]);
        List<String> values = jedis.hmget(key, names);
        Iterator<String> it = values.iterator();
        for (String f : names) {
          String v = it.next();
          if (v != null) {
            result.put(f, new StringByteIterator(v));
          }
        }
      }
      return Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    return hmset(key, values);
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    return hmset(key, values);
  }

  private Status hmset(String key, Map<String, ByteIterator> values) {
    try {
      return "OK".equals(jedis.hmset(key, StringByteIterator.getStringMap(values))) ? Status.OK : Status.ERROR;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status delete(String table, String key) {
    try {
      return jedis.del(key) == 0 ? Status.NOT_FOUND : Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
                     Vector<HashMap<String, ByteIterator>> result) {
    try {
      List<String> keys = new ArrayList<>();
      String cursor = ScanParams.SCAN_POINTER_START;
      ScanParams params = new ScanParams().count(1000);
      do {
        ScanResult<String> page = jedis.scan(cursor, params);
        for (String k : page.getResult()) {
          if (k.compareTo(startkey) >= 0 && keys.size() < recordcount) {
            keys.add(k);
          }
        }
        cursor = page.getCursor();
      } while (!ScanParams.SCAN_POINTER_START.equals(cursor) && keys.size() < recordcount);
      for (String k : keys) {
        HashMap<String, ByteIterator> values = new HashMap<>();
        Status s = read(table, k, fields, values);
        if (!s.isOk()) {
          return s;
        }
        result.add(values);
      }
      return Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }
}
